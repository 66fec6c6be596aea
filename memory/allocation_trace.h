// The allocation events of one device over time, written as Chrome trace-event JSON that opens in
// ui.perfetto.dev and chrome://tracing (Note [Allocation events] for what the events are).
//
// What the file shows, in one process named after the device:
//   - counters "allocated" and, on CUDA, "reserved" (bytes, "ph":"C"): the first starts at the
//     allocator's requested bytes when recording began and moves with every allocation and
//     release (requested, not rounded: on the CPU that is the allocator's allocated figure, on
//     CUDA its requested one); the second starts at its reserved bytes and moves with every
//     segment mapped or unmapped;
//   - one async slice per allocation ("ph":"b"/"e", category "alloc"), named by its tag
//     ("features.3/conv2d"), args {bytes, op, module, category, phase}; an allocation still
//     alive when the file is written ends there with args {live_at_end: true};
//   - instant events ("ph":"i") for segments mapped and unmapped and, across the whole trace,
//     out-of-memory failures.
// Memory is bounded: after `max_events` events further ones are dropped and counted (the counters
// stay exact, their samples stop), except the releases of recorded allocations, so that every
// recorded slice ends; "otherData" holds the recorded and dropped counts.
//
//   memory::AllocationTrace trace(Device::cuda(0));  // observes while alive
//   train_step(...);
//   trace.write_json("run.json");                    // open in ui.perfetto.dev
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/device.h"
#include "memory/allocator.h"
#include "memory/events.h"

namespace frugal::memory {

class AllocationTrace : public AllocationObserver {
 public:
  static constexpr size_t kDefaultMaxEvents = size_t{1} << 20;  // about 72 MiB of records

  // Records the events of `device`. `allocator` (allocator_for(device) when null) gives the bytes
  // live and reserved when recording begins.
  explicit AllocationTrace(Device device, size_t max_events = kDefaultMaxEvents,
                           const Allocator* allocator = nullptr);
  ~AllocationTrace() override;
  AllocationTrace(const AllocationTrace&) = delete;
  AllocationTrace& operator=(const AllocationTrace&) = delete;

  void on_event(const AllocationEvent& e) override;
  void stop();  // stops recording; what was recorded can still be written

  // Throws frugal::Error naming the path when the file cannot be written.
  void write_json(const std::string& path) const;
  void write_json(std::ostream& os) const;

  size_t recorded() const;          // events kept
  size_t dropped() const;           // events over the cap
  int64_t allocated_bytes() const;  // the counters now
  int64_t reserved_bytes() const;

 private:
  struct Record {
    int64_t ns = 0;  // since construction
    EventKind kind = EventKind::alloc;
    uint32_t thread = 0;  // 1, 2, ... in order of first appearance
    size_t bytes = 0;
    uint64_t id = 0;
    const AllocationTag* tag = nullptr;
    uintptr_t address = 0;
    int64_t allocated = 0;  // the counters after the event
    int64_t reserved = 0;
    bool paired = false;  // a free whose allocation was recorded (ends its slice)
  };
  uint32_t thread_index();

  Device device_;
  size_t max_events_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  bool observing_ = true;
  std::vector<Record> records_;
  std::unordered_set<uint64_t> open_;  // ids of recorded allocations not yet released
  std::unordered_map<std::thread::id, uint32_t> threads_;
  size_t dropped_ = 0;
  int64_t allocated_start_ = 0, reserved_start_ = 0;
  int64_t allocated_ = 0, reserved_ = 0;
};

}  // namespace frugal::memory
