// The stream hold and the events of Note [Timing device work alone] (device_timing.h).
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/device_timing.h"

namespace frugal::kernels::cuda {
namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Naps rather than spins: the thread needs no issue slots while it waits.
__global__ void hold_kernel(uint64_t nanoseconds) {
  const uint64_t begin = global_ns();
  while (global_ns() - begin < nanoseconds) __nanosleep(2000);
}

}  // namespace

TimingEvents::TimingEvents() {
  CUDA_CHECK(cudaEventCreate(&start));
  if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
    CUDA_CHECK_NOTHROW(cudaEventDestroy(start));
    CUDA_CHECK(e);
  }
}

TimingEvents::~TimingEvents() {
  CUDA_CHECK_NOTHROW(cudaEventDestroy(start));
  CUDA_CHECK_NOTHROW(cudaEventDestroy(stop));
}

bool algorithm_timing_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FRUGAL_CUDNN_BENCHMARK");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

bool algorithm_log_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FRUGAL_CUDNN_LOG");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

void hold_stream(cudaStream_t stream, int64_t nanoseconds) {
  hold_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(nanoseconds > 0 ? nanoseconds : 0));
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace frugal::kernels::cuda
