// The timing loop the standalone probes share (fused_pointwise_probe, cudnn_fusion_probe): the
// median of 7 timings of 10 calls of `launch` (a graph replay, or plain launches), in
// microseconds per unit of work, `units` units a call. Events on `stream`; a CUDA error ends the
// program with what failed.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace probe_timing {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "probe timing: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
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

}  // namespace probe_timing
