// CopyEvent on CUDA: a timing-free event recorded on the stream that ran the copy; the copy
// stream's context.
#include "data/copy_event.h"

#include <cuda_runtime.h>

#include "base/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/runtime.h"

namespace frugal::data {

using kernels::cuda::DeviceGuard;  // events belong to the device current at their creation

CopyEvent::~CopyEvent() {
  if (event_ == nullptr) return;
  CUDA_CHECK_NOTHROW(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
  CUDA_CHECK_NOTHROW(cudaEventDestroy(static_cast<cudaEvent_t>(event_)));
}

void CopyEvent::record(const kernels::Context& ctx) {
  FRUGAL_CHECK(ctx.device.is_cuda(), "CopyEvent::record: needs a CUDA context, got ", ctx.device);
  DeviceGuard guard(ctx.device);
  if (event_ != nullptr && device_ != ctx.device) {
    wait();
    CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event_)));
    event_ = nullptr;
  }
  if (event_ == nullptr) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
    device_ = ctx.device;
  }
  CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(ctx.stream)));
  pending_ = true;
}

void CopyEvent::wait() {
  if (!pending_) return;
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
  pending_ = false;
}

void CopyEvent::stream_wait(const kernels::Context& ctx) {
  if (event_ == nullptr) return;  // never recorded; a finished event costs the stream nothing
  FRUGAL_CHECK(ctx.device.is_cuda() && ctx.stream != nullptr,
               "CopyEvent::stream_wait: needs a CUDA context with a stream, got ", ctx.device);
  DeviceGuard guard(ctx.device);
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(ctx.stream),
                                 static_cast<cudaEvent_t>(event_), 0));
}

kernels::Context copy_context(Device device) {
  kernels::Context ctx = kernels::Context::of(device);
  ctx.stream = kernels::cuda::copy_stream(device);
  return ctx;
}

}  // namespace frugal::data
