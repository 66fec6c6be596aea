// Marks the end of an asynchronous host-to-device copy so that its pinned source buffer can be
// reused: record() after the copy on the copy's stream, wait() before touching the source again.
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

 private:
  void* event_ = nullptr;  // cudaEvent_t, created on first record
  Device device_;
  bool pending_ = false;
};

}  // namespace frugal::data
