// What the standalone probes (bench/*.cu) share: CUDA and cuBLAS checks that end the program with
// what failed and the program's name, an upload, and the timing loop, the median of 7 timings of
// 10 calls of `launch` (a graph replay, or plain launches) in microseconds per unit of work,
// `units` units a call, with events on `stream`; and that loop over the replays of a graph that
// runs one piece of work on each of several input sets.
#pragma once

#include <cublas_v2.h>
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

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: %s: cuBLAS status %d\n", program_invocation_short_name, what,
                 static_cast<int>(s));
    std::exit(1);
  }
}

// One wave of `kernel`'s blocks of `threads` (the blocks device 0 holds at once), or fewer where
// `items`, one a thread, need fewer.
template <typename Kernel>
int one_wave(Kernel kernel, int threads, long items) {
  int sms = 0, per_sm = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0), "occupancy");
  return static_cast<int>(std::min<long>((items + threads - 1) / threads, long{per_sm} * sms));
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

// Microseconds a set: median_us over the replays of a CUDA graph, captured on `stream`, that
// calls run(set) once for each of `sets` (enough of them to keep a round past the L2).
template <typename Sets, typename Run>
float graph_median_us(cudaStream_t stream, const Sets& sets, Run run) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (const auto& set : sets) run(set);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphLaunch(exec, stream), "warm-up replay");
  check(cudaStreamSynchronize(stream), "warm-up");
  const float us =
      median_us(stream, sets.size(), [&] { check(cudaGraphLaunch(exec, stream), "replay"); });
  check(cudaGraphExecDestroy(exec), "destroy");
  check(cudaGraphDestroy(graph), "destroy");
  return us;
}

}  // namespace probe
