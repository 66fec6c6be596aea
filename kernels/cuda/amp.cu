// CUDA loss-scaling kernels (kernels/amp.h), term by term as the CPU twins in kernels/cpu/amp.cpp.
// Every flag and scalar is read on the device, so a step needs no host synchronisation.
#include <cmath>

#include "kernels/amp.h"
#include "kernels/cuda/cuda_common.cuh"

namespace frugal::kernels::cuda {
namespace {

__global__ void unscale_and_check_kernel(int64_t n, float* grad, const float* scale,
                                         float* found_inf) {
  const float inv = 1.0f / *scale;
  bool bad = false;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const float g = grad[i];
    bad = bad || !isfinite(g);
    grad[i] = g * inv;
  }
  // Any thread that saw a non-finite value writes the same 1: no atomic needed.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

__global__ void update_scale_kernel(float* scale, float* growth_tracker, const float* found_inf,
                                    double growth, double backoff, int64_t interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(*scale * backoff);
    *growth_tracker = 0.0f;
    return;
  }
  const float successful = *growth_tracker + 1.0f;
  if (successful >= static_cast<float>(interval)) {
    const float grown = static_cast<float>(*scale * growth);
    if (isfinite(grown)) *scale = grown;
    *growth_tracker = 0.0f;
  } else {
    *growth_tracker = successful;
  }
}

__global__ void count_step_kernel(float* step, const float* found_inf) {
  if (found_inf == nullptr || *found_inf == 0.0f) *step += 1.0f;
}

}  // namespace

void unscale_and_check(const Context& ctx, int64_t n, float* grad, const float* scale,
                       float* found_inf) {
  cudaStream_t s = stream_of(ctx, "unscale_and_check");
  FRUGAL_CHECK(n >= 0, "unscale_and_check: negative size ", n);
  FRUGAL_CHECK(scale != nullptr && found_inf != nullptr,
               "unscale_and_check: scale and found_inf must be given");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  unscale_and_check_kernel<<<grid_for(ctx, n), kThreads, 0, s>>>(n, grad, scale, found_inf);
  FRUGAL_LAUNCH_CHECK();
}

void update_scale(const Context& ctx, float* scale, float* growth_tracker, const float* found_inf,
                  double growth_factor, double backoff_factor, int64_t growth_interval) {
  cudaStream_t s = stream_of(ctx, "update_scale");
  FRUGAL_CHECK(growth_interval > 0, "update_scale: growth_interval must be > 0, got ",
               growth_interval);
  FRUGAL_CHECK(found_inf != nullptr, "update_scale: found_inf must be given");
  DeviceGuard guard(ctx.device);
  update_scale_kernel<<<1, 1, 0, s>>>(scale, growth_tracker, found_inf, growth_factor,
                                      backoff_factor, growth_interval);
  FRUGAL_LAUNCH_CHECK();
}

void count_step(const Context& ctx, float* step, const float* found_inf) {
  cudaStream_t s = stream_of(ctx, "count_step");
  DeviceGuard guard(ctx.device);
  count_step_kernel<<<1, 1, 0, s>>>(step, found_inf);
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace frugal::kernels::cuda
