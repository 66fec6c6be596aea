// One caching allocator per CUDA device, created on first use and never destroyed (see
// cuda_allocators.h), plus pinned host memory from cudaHostAlloc.
#include <cuda_runtime.h>

#include <mutex>
#include <sstream>
#include <unordered_map>

#include "base/error.h"
#include "memory/cuda/cuda_check.h"
#include "memory/cuda_allocators.h"
#include "memory/segment_counter.h"

namespace frugal::memory {

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // "no device" must not surface in a later, unrelated check
    return 0;
  }
  return count;
}

CachingAllocator& cuda_caching_allocator(int device) {
  static std::mutex mu;
  static std::unordered_map<int, CachingAllocator*> allocators;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = allocators.find(device); it != allocators.end()) return *it->second;
  int count = 0;
  FRUGAL_MEMORY_CUDA_CHECK(cudaGetDeviceCount(&count));
  FRUGAL_CHECK(device >= 0 && device < count, "cuda_caching_allocator: no device cuda:", device,
               " (", count, " CUDA devices visible)");
  // Leaked on purpose: tensors in static storage may still hold its blocks at exit.
  auto* a = new CachingAllocator(make_cuda_memory_source(device), Device::cuda(device));
  allocators.emplace(device, a);
  return *a;
}

namespace {

class PinnedHostAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return {};
    void* ptr = nullptr;
    const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      counter_.count_oom();
      std::ostringstream os;
      os << "pinned host memory exhausted: tried to allocate " << bytes << " bytes ("
         << static_cast<double>(bytes) / static_cast<double>(kMiB) << " MiB)\n"
         << counter_.stats().summary() << "\n  try fewer loader workers or a smaller batch";
      notify_memory_event(EventKind::oom, device(), bytes);  // Note [Allocation events]
      throw OutOfMemoryError(os.str());
    }
    FRUGAL_MEMORY_CUDA_CHECK(err);
    counter_.add(bytes);
    return DataPtr(ptr, bytes, this);
  }
  MemoryStats stats() const override { return counter_.stats(); }
  void reset_peak_stats() override { counter_.reset_peaks(); }
  Device device() const override { return Device::cpu(); }

 protected:
  void release(void* ptr, size_t size) noexcept override {
    FRUGAL_MEMORY_CUDA_WARN(cudaFreeHost(ptr));
    counter_.remove(size);
  }

 private:
  SegmentCounter counter_;  // every pinned buffer is a segment of its own
};

}  // namespace

Allocator& pinned_host_allocator() {
  // A CUDA build on a machine without a GPU still trains on the CPU: plain host memory then.
  static Allocator* a =
      cuda_device_count() > 0 ? static_cast<Allocator*>(new PinnedHostAllocator) : &cpu_allocator();
  return *a;  // never destroyed, like the device allocators
}

}  // namespace frugal::memory
