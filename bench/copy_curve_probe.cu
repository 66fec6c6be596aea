// How fast a plain copy of each size runs when each launch stands alone: the floor under every
// kernel of a training step as `ncu` times it (caches flushed before each kernel), for
// bench/copy_bound.py's attainable step time (Note [The copy bound] there). A standalone CUDA
// program, not linked with frugal.
//
// Copies sizes from 4 KiB to 1 GiB, a quarter power of two apart, kReps launches each, between
// cudaProfilerStart and Stop (ncu --profile-from-start off), each in two forms: one 16-byte
// element a thread over as many blocks as that takes, and a grid-stride loop over the blocks the
// device holds at once. Without ncu it prints the event-timed median of each size and form.
#include <cuda_profiler_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "probe_common.cuh"

namespace {

using probe::check;

constexpr int kThreads = 256, kReps = 5;
constexpr size_t kMinBytes = size_t{4} << 10, kMaxBytes = size_t{1} << 30;

__global__ void copy_once_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, long n) {
  const long i = blockIdx.x * long{blockDim.x} + threadIdx.x;
  if (i < n) y[i] = x[i];
}

__global__ void copy_strided_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, long n) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n;
       i += long{gridDim.x} * blockDim.x) {
    y[i] = x[i];
  }
}

// The sizes copied: kMinBytes * 2^(k/4), rounded to 16 bytes, up to kMaxBytes.
std::vector<size_t> sizes() {
  std::vector<size_t> out;
  for (int k = 0;; ++k) {
    const double b = static_cast<double>(kMinBytes) * std::pow(2.0, k / 4.0);
    if (b > static_cast<double>(kMaxBytes)) break;
    out.push_back(static_cast<size_t>(b) / 16 * 16);
  }
  return out;
}

}  // namespace

int main() {
  // the largest copy needs more blocks than the device holds: one wave is all of them
  const long resident = probe::one_wave(copy_strided_kernel, kThreads, kMaxBytes / 16);
  uint4 *x = nullptr, *y = nullptr;
  check(cudaMalloc(&x, kMaxBytes), "malloc");
  check(cudaMalloc(&y, kMaxBytes), "malloc");
  check(cudaMemset(x, 1, kMaxBytes), "memset");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  auto once = [&](long n) {
    copy_once_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        x, y, n);
  };
  auto strided = [&](long n) {
    const long blocks = std::min(resident, (n + kThreads - 1) / kThreads);
    copy_strided_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, n);
  };
  check(cudaStreamSynchronize(stream), "warm-up");
  check(cudaProfilerStart(), "profiler start");
  for (size_t bytes : sizes()) {
    const long n = static_cast<long>(bytes / 16);
    for (int r = 0; r < kReps; ++r) once(n), strided(n);
  }
  check(cudaGetLastError(), "launch");
  check(cudaStreamSynchronize(stream), "profiled copies");
  check(cudaProfilerStop(), "profiler stop");
  std::printf(
      "bytes copied, one element a thread (us), grid-stride (us), GB/s of the faster "
      "(read + write), event-timed, back to back\n");
  for (size_t bytes : sizes()) {
    const long n = static_cast<long>(bytes / 16);
    const float a = probe::median_us(stream, 1, [&] { once(n); });
    const float b = probe::median_us(stream, 1, [&] { strided(n); });
    std::printf("%12zu %10.2f %10.2f %8.0f\n", bytes, a, b,
                2.0 * static_cast<double>(bytes) / (std::min(a, b) * 1e3));
  }
  check(cudaGetLastError(), "launch");
  check(cudaFree(x), "free");
  check(cudaFree(y), "free");
  return 0;
}
