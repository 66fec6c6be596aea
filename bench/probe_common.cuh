// What the standalone probes (bench/*.cu) share: a CUDA check that ends the program with what
// failed and the program's name, an upload, and the timing loop, the median of 7 timings of 10
// calls of `launch` (a graph replay, or plain launches) in microseconds per unit of work, `units`
// units a call, with events on `stream`.
#pragma once

#include <cuda_runtime.h>
#include <errno.h>  // program_invocation_short_name (glibc)

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace probe {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what,
                 cudaGetErrorString(e));
    std::exit(1);
  }
}

// A device copy of `host`; the caller frees it.
template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  check(cudaMalloc(&d, host.size() * sizeof(T)), "malloc");
  check(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

template <typename Launch>
float median_us(cudaStream_t stream, size_t units, Launch launch) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<float> us;
  for (int t = 0; t < 7; ++t) {
    check(cudaEventRecord(start, stream), "record");
    for (int r = 0; r < 10; ++r) launch();
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    us.push_back(ms * 1000.0f / (10.0f * static_cast<float>(units)));
  }
  check(cudaEventDestroy(start), "event");
  check(cudaEventDestroy(stop), "event");
  std::nth_element(us.begin(), us.begin() + 3, us.end());
  return us[3];
}

}  // namespace probe
