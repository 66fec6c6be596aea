// CopyEvent on CUDA: a timing-free event recorded on the stream that ran the copy; the copy
// stream's context.
#include "data/copy_event.h"

#include <cuda_runtime.h>

#include <cstdio>

#include "base/error.h"
#include "kernels/cuda/runtime.h"

#define FRUGAL_DATA_CUDA_CHECK(call)                                                  \
  do {                                                                                \
    cudaError_t frugal_err_ = (call);                                                 \
    if (frugal_err_ != cudaSuccess) {                                                 \
      FRUGAL_FAIL("CUDA error in ", #call, ": ", cudaGetErrorName(frugal_err_), " (", \
                  cudaGetErrorString(frugal_err_), ")");                              \
    }                                                                                 \
  } while (0)

namespace frugal::data {
namespace {
// Events belong to the device that was current when they were created.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FRUGAL_DATA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FRUGAL_DATA_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};
}  // namespace

CopyEvent::~CopyEvent() {
  if (event_ == nullptr) return;
  cudaError_t err = cudaEventSynchronize(static_cast<cudaEvent_t>(event_));
  if (err == cudaSuccess) err = cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (err != cudaSuccess) {
    std::fprintf(stderr, "frugal: CopyEvent: %s\n", cudaGetErrorString(err));
  }
}

void CopyEvent::record(const kernels::Context& ctx) {
  FRUGAL_CHECK(ctx.device.is_cuda(), "CopyEvent::record: needs a CUDA context, got ", ctx.device);
  DeviceGuard guard(ctx.device.index);
  if (event_ != nullptr && device_ != ctx.device) {
    wait();
    FRUGAL_DATA_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event_)));
    event_ = nullptr;
  }
  if (event_ == nullptr) {
    cudaEvent_t e = nullptr;
    FRUGAL_DATA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
    device_ = ctx.device;
  }
  FRUGAL_DATA_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(ctx.stream)));
  pending_ = true;
}

void CopyEvent::wait() {
  if (!pending_) return;
  FRUGAL_DATA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
  pending_ = false;
}

void CopyEvent::stream_wait(const kernels::Context& ctx) {
  if (event_ == nullptr) return;  // never recorded; a finished event costs the stream nothing
  FRUGAL_CHECK(ctx.device.is_cuda() && ctx.stream != nullptr,
               "CopyEvent::stream_wait: needs a CUDA context with a stream, got ", ctx.device);
  DeviceGuard guard(ctx.device.index);
  FRUGAL_DATA_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(ctx.stream),
                                             static_cast<cudaEvent_t>(event_), 0));
}

kernels::Context copy_context(Device device) {
  kernels::Context ctx = kernels::Context::of(device);
  ctx.stream = kernels::cuda::copy_stream(device);
  return ctx;
}

}  // namespace frugal::data
