// The CPU tracking allocator and the meta (count-only) allocator, plus the per-device registry.
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "base/error.h"
#include "memory/allocator.h"
#include "memory/oom_injection.h"
#include "memory/oom_report.h"
#include "memory/segment_counter.h"
#ifdef FRUGAL_WITH_CUDA
#include "memory/cuda_allocators.h"
#endif

namespace frugal::memory {
namespace {

constexpr size_t kCpuAlignment = 64;  // one cache line; also enough for AVX-512 loads

// Counts every allocation the same way (SegmentCounter) under an optional cap; subclasses only
// decide where bytes come from.
class CountingAllocator : public Allocator {
 public:
  MemoryStats stats() const override { return counter_.stats(); }
  void reset_peak_stats() override { counter_.reset_peaks(); }
  void set_memory_cap_bytes(size_t bytes) override { cap_bytes_ = bytes; }
  size_t memory_cap_bytes() const override { return cap_bytes_; }

 protected:
  // Counts `bytes` as allocated unless they would pass the cap (set_memory_cap_bytes): then
  // counts the refusal and returns false.
  bool count_alloc_under_cap(size_t bytes) { return counter_.add(bytes, cap_bytes_); }
  void count_free(size_t bytes) { counter_.remove(bytes); }
  void count_oom() { counter_.count_oom(); }

 private:
  SegmentCounter counter_;
  std::atomic<size_t> cap_bytes_{0};
};

class CpuAllocator final : public CountingAllocator {
 public:
  DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return {};
    detail::check_injected_oom(device(), bytes);
    size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    // Counted only once it exists: a request the host refuses must not raise the peaks (PyTorch's
    // statistics never see a failed allocation).
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    const bool capped = p != nullptr && !count_alloc_under_cap(bytes);  // counts its refusal
    if (capped) {
      std::free(p);
      p = nullptr;
    }
    if (p == nullptr) {
      if (!capped) count_oom();
      notify_memory_event(EventKind::oom, Device::cpu(), bytes);  // Note [Allocation events]
      std::ostringstream os;
      os << "CPU out of memory: tried to allocate " << bytes << " bytes"
         << (capped ? "; this would exceed the memory cap of " +
                          std::to_string(memory_cap_bytes()) + " bytes"
                    : std::string())
         << "\n"
         << stats().summary() << oom_report(device());
      throw OutOfMemoryError(os.str());
    }
    return DataPtr(p, bytes, this);
  }
  Device device() const override { return Device::cpu(); }

 protected:
  void release(void* ptr, size_t size) noexcept override {
    std::free(ptr);
    count_free(size);
  }
};

class MetaAllocator final : public CountingAllocator {
 public:
  DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return {};
    detail::check_injected_oom(device(), bytes);  // dry runs of out-of-memory paths, too
    if (!count_alloc_under_cap(bytes)) {
      throw OutOfMemoryError("meta out of memory: tried to allocate " + std::to_string(bytes) +
                             " bytes; this would exceed the memory cap of " +
                             std::to_string(memory_cap_bytes()) + " bytes\n" + stats().summary());
    }
    return DataPtr(nullptr, bytes, this);
  }
  Device device() const override { return Device::meta(); }

 protected:
  void release(void*, size_t size) noexcept override { count_free(size); }
};

constexpr int kMaxCudaDevices = 16;
std::array<Allocator*, kMaxCudaDevices> g_cuda_allocators{};
std::mutex g_registry_mu;

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

Allocator& meta_allocator() {
  static MetaAllocator a;
  return a;
}

void Allocator::set_memory_cap_bytes(size_t bytes) {
  FRUGAL_CHECK(bytes == 0, "set_memory_cap_bytes: the allocator of ", device().str(),
               " cannot be capped");
}

void register_device_allocator(Device device, Allocator* allocator) {
  FRUGAL_CHECK(device.is_cuda() && device.index >= 0 && device.index < kMaxCudaDevices,
               "register_device_allocator: unsupported device ", device.str());
  std::lock_guard<std::mutex> lock(g_registry_mu);
  g_cuda_allocators[static_cast<size_t>(device.index)] = allocator;
}

Allocator& allocator_for(Device device) {
  switch (device.type) {
    case DeviceType::cpu:
      return cpu_allocator();
    case DeviceType::meta:
      return meta_allocator();
    case DeviceType::cuda: {
      FRUGAL_CHECK(device.index >= 0 && device.index < kMaxCudaDevices, "no such device ",
                   device.str());
      std::lock_guard<std::mutex> lock(g_registry_mu);
      Allocator*& a = g_cuda_allocators[static_cast<size_t>(device.index)];
#ifdef FRUGAL_WITH_CUDA
      // First use of the device: create its caching allocator (throws for a missing device).
      if (a == nullptr) a = &cuda_caching_allocator(device.index);
#endif
      FRUGAL_CHECK(a != nullptr, "no allocator for ", device.str(),
                   ": frugal was built without CUDA or the device is not initialised");
      return *a;
    }
  }
  FRUGAL_FAIL("allocator_for: bad device");
}

}  // namespace frugal::memory
