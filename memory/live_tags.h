// Live bytes by tag on one device: what the out-of-memory report lists as the largest live
// allocations and what the memory monitor compares across steps to name what grew.
//
//   memory::LiveTags live(Device::cuda());   // observes while alive
//   ... run steps ...
//   for (const auto& e : live.largest(5)) std::printf("%s: %lld bytes\n", e.tag.c_str(), ...);
//
// A tag is the allocation's tag_name (module path and op, Note [Allocation events]) and its
// category: "features.3/conv2d (forward)"; "(resident)" outside any module and op. Allocations
// made before the tracker was made are not counted.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/device.h"
#include "memory/events.h"

namespace frugal::memory {

// The name LiveTags gives an allocation's tag: its tag_name and category.
std::string live_tag_name(const AllocationTag& tag);

class LiveTags : public AllocationObserver {
 public:
  explicit LiveTags(Device device);
  ~LiveTags() override;
  LiveTags(const LiveTags&) = delete;
  LiveTags& operator=(const LiveTags&) = delete;
  void on_event(const AllocationEvent& e) override;

  struct Entry {
    std::string tag;
    int64_t bytes = 0;
    int64_t count = 0;  // live allocations
  };
  std::vector<Entry> largest(size_t n) const;  // by bytes, largest first
  std::map<std::string, int64_t> bytes_by_tag() const;
  int64_t live_bytes() const;

  // The largest live tags of the newest tracker alive on `device`, asked while no tracker can
  // go away; false when none observes the device (the out-of-memory report's question).
  static bool largest_on(Device device, size_t n, std::vector<Entry>* out);

 private:
  Device device_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_name() const;  // the live tags' counts summed by name

  struct Live {
    int64_t bytes;
    const AllocationTag* tag;
  };
  struct Counts {
    int64_t bytes = 0, count = 0;
  };
  std::unordered_map<uint64_t, Live> live_;  // by event id
  std::unordered_map<const AllocationTag*, Counts> by_tag_;
  int64_t live_bytes_ = 0;
};

}  // namespace frugal::memory
