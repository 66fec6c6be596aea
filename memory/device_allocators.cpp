// The CPU-only build's answers for CUDA-backed allocators; with CUDA, memory/cuda/ defines them.
#ifndef FRUGAL_WITH_CUDA

#include "base/error.h"
#include "memory/cuda_allocators.h"

namespace frugal::memory {

Allocator& pinned_host_allocator() { return cpu_allocator(); }

int cuda_device_count() noexcept { return 0; }

CachingAllocator& cuda_caching_allocator(int device) {
  FRUGAL_FAIL("cuda_caching_allocator(", device, "): frugal was built without CUDA");
}

}  // namespace frugal::memory

#endif  // FRUGAL_WITH_CUDA
