// Device segments for the caching allocator: cudaMalloc, cudaFree and cudaMemGetInfo on one
// device, each call made with that device current and the caller's device restored afterwards.
#include <cuda_runtime.h>

#include "base/error.h"
#include "memory/cuda/cuda_check.h"
#include "memory/cuda_allocators.h"

namespace frugal::memory {
namespace {

// Makes `device` current for one scope; allocations land on the device the allocator belongs to,
// whatever the calling thread had selected.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FRUGAL_MEMORY_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FRUGAL_MEMORY_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != device_) FRUGAL_MEMORY_CUDA_WARN(cudaSetDevice(previous_));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

class CudaMemorySource final : public DeviceMemorySource {
 public:
  explicit CudaMemorySource(int device) : device_(device) {}

  void* raw_alloc(size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
      // Out of memory is not sticky: clear it so the next launch check does not report it, and
      // let the allocator free its cache and retry.
      (void)cudaGetLastError();
      return nullptr;
    }
    FRUGAL_MEMORY_CUDA_CHECK(err);
    return ptr;
  }

  void raw_free(void* ptr) override {
    DeviceGuard guard(device_);
    FRUGAL_MEMORY_CUDA_CHECK(cudaFree(ptr));
  }

  size_t total_bytes() const override { return mem_info().second; }
  size_t free_bytes() const override { return mem_info().first; }

 private:
  std::pair<size_t, size_t> mem_info() const {
    DeviceGuard guard(device_);
    size_t free = 0, total = 0;
    FRUGAL_MEMORY_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return {free, total};
  }

  int device_;
};

}  // namespace

std::unique_ptr<DeviceMemorySource> make_cuda_memory_source(int device) {
  return std::make_unique<CudaMemorySource>(device);
}

}  // namespace frugal::memory
