// StepTimer: CUDA events when the device is CUDA (only compiled in with FRUGAL_WITH_CUDA), a
// steady clock otherwise.
#include "train/step_timer.h"

#include <algorithm>

#include "base/error.h"

#ifdef FRUGAL_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#endif

namespace frugal::train {
namespace {

#ifdef FRUGAL_WITH_CUDA
cudaStream_t stream_of(Device device) {
  return static_cast<cudaStream_t>(kernels::cuda::compute_stream(device));
}
#endif

}  // namespace

StepTimer::StepTimer(Device device, int64_t steps) : device_(device) {
  FRUGAL_CHECK(steps >= 1, "StepTimer: needs at least one step, got ", steps);
#ifdef FRUGAL_WITH_CUDA
  if (device.is_cuda()) {
    events_.resize(static_cast<size_t>(2 * steps), nullptr);
    for (void*& e : events_) {
      cudaEvent_t ev = nullptr;
      CUDA_CHECK(cudaEventCreate(&ev));
      e = ev;
    }
  }
#endif
  host_.resize(static_cast<size_t>(steps + 1));
}

StepTimer::~StepTimer() {
#ifdef FRUGAL_WITH_CUDA
  for (void* e : events_) CUDA_CHECK_NOTHROW(cudaEventDestroy(static_cast<cudaEvent_t>(e)));
#endif
}

void StepTimer::begin(int64_t i) {
#ifdef FRUGAL_WITH_CUDA
  if (device_.is_cuda()) {
    CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_.at(static_cast<size_t>(2 * i))),
                               stream_of(device_)));
    return;
  }
#endif
  host_.at(static_cast<size_t>(i)) = std::chrono::steady_clock::now();
}

void StepTimer::end(int64_t i) {
#ifdef FRUGAL_WITH_CUDA
  if (device_.is_cuda()) {
    CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_.at(static_cast<size_t>(2 * i + 1))),
                               stream_of(device_)));
    return;
  }
#endif
  const auto now = std::chrono::steady_clock::now();
  host_.at(static_cast<size_t>(i + 1)) = now;
  host_ms_.push_back(
      std::chrono::duration<double, std::milli>(now - host_[static_cast<size_t>(i)]).count());
}

std::vector<double> StepTimer::milliseconds() {
#ifdef FRUGAL_WITH_CUDA
  if (device_.is_cuda()) {
    CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(events_.back())));
    std::vector<double> ms;
    for (size_t i = 0; i + 1 < events_.size(); i += 2) {
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, static_cast<cudaEvent_t>(events_[i]),
                                      static_cast<cudaEvent_t>(events_[i + 1])));
      ms.push_back(t);
    }
    return ms;
  }
#endif
  return host_ms_;
}

const char* StepTimer::clock_name() const {
  return device_.is_cuda() ? "cuda events on the compute stream" : "steady_clock";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace frugal::train
