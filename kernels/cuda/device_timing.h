// Timing a piece of device work without the host time it takes to enqueue it.
//
// Note [Timing device work alone]: CUDA events recorded around a call on an idle stream measure
// from the start event to the stop event on the device, and the device reaches the start event at
// once; if the call then spends 30-130 us on the host before its kernel is enqueued (cuDNN's
// legacy API does, Note [Pointwise convolutions as GEMMs] in conv.cu), that host time is in the
// measurement. The conv benchmark (Note [Conv algorithm cache]) then ranked candidates partly by
// host time, which a replayed step never pays: in session 28 its legacy candidates for ResNet-18
// summed 5.28 ms against 2.63 ms for the graph API's, yet the replayed step gained only 0.34 ms.
// So the timed work is enqueued behind a kernel that holds the stream for longer than the host
// needs: the start event passes when the hold ends, by which time the work is queued.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"

namespace frugal::kernels::cuda {

// Whether the first call of a cuDNN convolution or a cuBLAS GEMM times its algorithms (Note [Conv
// algorithm cache] in conv.cu, Note [Timed GEMM algorithms] in gemm_timed.h): yes unless
// FRUGAL_CUDNN_BENCHMARK=0 (read once). Deterministic mode times nothing either way.
bool algorithm_timing_enabled();
// Whether FRUGAL_CUDNN_LOG=1 (read once): the timed algorithms are printed to stderr.
bool algorithm_log_enabled();

// How long time_on_device holds the stream: several times the host overhead seen in a call.
constexpr int64_t kTimingHoldNs = 500'000;

// Enqueues a one-thread kernel on `stream` that returns after `nanoseconds` of device time.
void hold_stream(cudaStream_t stream, int64_t nanoseconds);

// The two events time_on_device records, made once for many timings and destroyed with the
// object, also when a timed call throws.
struct TimingEvents {
  cudaEvent_t start = nullptr, stop = nullptr;
  TimingEvents();
  ~TimingEvents();
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;
};

// Milliseconds of device time from the start to the end of what `work()` enqueues on `stream`,
// synchronising the host once. Host time inside work() is not measured while it is shorter than
// `hold_ns`.
template <typename Work>
float time_on_device(cudaStream_t stream, const TimingEvents& events, Work&& work,
                     int64_t hold_ns = kTimingHoldNs) {
  hold_stream(stream, hold_ns);
  CUDA_CHECK(cudaEventRecord(events.start, stream));
  work();
  CUDA_CHECK(cudaEventRecord(events.stop, stream));
  CUDA_CHECK(cudaEventSynchronize(events.stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
  return ms;
}

}  // namespace frugal::kernels::cuda
