// Where the caching allocator gets its segments: cudaMalloc on a device, cudaHostAlloc for pinned
// host memory, or a fake source in tests (the block logic is plain host code, tested on the CPU).
#pragma once

#include <cstddef>

namespace frugal::memory {

class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  // Returns `bytes` of memory, or nullptr when the device is out of memory (the allocator then
  // frees its cache and retries). Other failures (a broken driver) throw frugal::Error.
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr) = 0;
  // Device capacity and what is free right now (all processes), for caps and OOM messages.
  virtual size_t total_bytes() const = 0;
  virtual size_t free_bytes() const = 0;
};

}  // namespace frugal::memory
