// A fake device for the caching allocator's tests: hands out fake, never-dereferenced addresses
// under a byte limit, can be told to fail, and records every call.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "base/error.h"
#include "memory/caching_allocator.h"
#include "memory/device_memory_source.h"

namespace frugal::memory::testing {

class FakeDeviceSource final : public DeviceMemorySource {
 public:
  // Segments are spaced kGap apart so two segments are never contiguous: a merge across
  // segments would show up as a broken invariant, not as a lucky coincidence.
  static constexpr uintptr_t kBase = uintptr_t{1} << 40;
  static constexpr uintptr_t kGap = 64 * kMiB;

  explicit FakeDeviceSource(size_t limit_bytes) : limit_(limit_bytes) {}
  ~FakeDeviceSource() override {
    if (used_at_destruction != nullptr) *used_at_destruction = used_;
  }

  void* raw_alloc(size_t bytes) override {
    alloc_calls++;
    if (fail_next > 0) {
      fail_next--;
      return nullptr;
    }
    if (used_ + bytes > limit_) return nullptr;
    const uintptr_t addr = next_;
    next_ += bytes + kGap;
    live[addr] = bytes;
    used_ += bytes;
    segment_sizes.push_back(bytes);
    return reinterpret_cast<void*>(addr);
  }
  void raw_free(void* ptr) override {
    if (fail_frees) FRUGAL_FAIL("fake source: injected free failure");  // a sticky CUDA error
    auto it = live.find(reinterpret_cast<uintptr_t>(ptr));
    FRUGAL_CHECK(it != live.end(), "fake source: free of unknown segment");
    used_ -= it->second;
    live.erase(it);
    free_calls++;
  }
  size_t total_bytes() const override { return limit_; }
  size_t free_bytes() const override { return limit_ - used_; }

  size_t used() const { return used_; }

  int fail_next = 0;        // the next n raw_allocs fail
  bool fail_frees = false;  // raw_free throws, as cudaFree after a sticky error
  int alloc_calls = 0;
  int free_calls = 0;
  std::vector<size_t> segment_sizes;      // every successful raw_alloc, in order
  std::map<uintptr_t, size_t> live;       // address -> bytes
  size_t* used_at_destruction = nullptr;  // where to report bytes never freed

 private:
  size_t limit_;
  size_t used_ = 0;
  uintptr_t next_ = kBase;
};

// An allocator over a fake device, keeping a handle on the source it owns.
struct FakeDevice {
  explicit FakeDevice(size_t limit_bytes = size_t{1} << 30)
      : FakeDevice(std::make_unique<FakeDeviceSource>(limit_bytes)) {}

  FakeDeviceSource* source;
  CachingAllocator alloc;

 private:
  explicit FakeDevice(std::unique_ptr<FakeDeviceSource> s)
      : source(s.get()), alloc(std::move(s), Device::cuda(0)) {}
};

inline uintptr_t addr_of(const DataPtr& p) { return reinterpret_cast<uintptr_t>(p.get()); }

}  // namespace frugal::memory::testing
