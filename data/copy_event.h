// Marks a point on a CUDA stream: the end of an asynchronous host-to-device copy, so that its
// pinned source buffer can be reused (record() after the copy, wait() before touching the source
// again), or a cross-stream dependency (record() on one stream, stream_wait() on another).
#pragma once

#include "base/device.h"
#include "kernels/context.h"

namespace frugal::data {

class CopyEvent {
 public:
  CopyEvent() = default;
  CopyEvent(const CopyEvent&) = delete;
  CopyEvent& operator=(const CopyEvent&) = delete;
  ~CopyEvent();

  // Records the work queued so far on ctx.stream (a CUDA context).
  void record(const kernels::Context& ctx);
  // Blocks until the recorded work has finished; returns at once when nothing is recorded.
  void wait();
  // Makes work queued later on ctx.stream wait for the recorded work, without blocking the host
  // (cudaStreamWaitEvent; a later record() does not change what was waited for). Nothing when
  // nothing is recorded.
  void stream_wait(const kernels::Context& ctx);

 private:
  void* event_ = nullptr;  // cudaEvent_t, created on first record
  Device device_;
  bool pending_ = false;
};

// A context on the device's copy stream (kernels::cuda::copy_stream), for copies that overlap
// the compute stream's work. Throws without CUDA.
kernels::Context copy_context(Device device);

}  // namespace frugal::data
