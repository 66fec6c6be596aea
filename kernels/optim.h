// Fused optimizer updates over f32 parameter tensors. found_inf (nullable, device f32 scalar)
// is the loss scaler's flag: when it is non-zero the kernel leaves param and state untouched,
// so a skipped step needs no host synchronisation.
#pragma once

#include <cstdint>

#include "kernels/context.h"

namespace frugal::kernels {

struct SgdParams {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = true;  // momentum buffer starts as the gradient, as in PyTorch
  // When set, the learning rate is read from this f32 scalar on ctx.device instead of `lr` (a
  // host pointer on the CPU): Note [Learning rate on the device] in optim/optimizer.h.
  const float* lr_device = nullptr;
};

// PyTorch's SGD: g += wd * p; buf = first ? g : momentum * buf + (1 - dampening) * g;
// g = nesterov ? g + momentum * buf : buf; p -= lr * g. momentum_buf unused when momentum == 0.
FRUGAL_DECLARE_KERNEL(sgd_step,
                      (const Context& ctx, int64_t n, float* param, const float* grad,
                       float* momentum_buf, const SgdParams& p, const float* found_inf),
                      (ctx, n, param, grad, momentum_buf, p, found_inf))

// sgd_step over `count` tensors at once (host arrays of device pointers; momentum_bufs may be
// null when momentum == 0): one launch per 32 parameters instead of one each, which matters when
// the host bounds a step (158 launches a step for MobileNetV2).
FRUGAL_DECLARE_KERNEL(sgd_step_many,
                      (const Context& ctx, int64_t count, float* const* params,
                       const float* const* grads, float* const* momentum_bufs, const int64_t* sizes,
                       const SgdParams& p, const float* found_inf),
                      (ctx, count, params, grads, momentum_bufs, sizes, p, found_inf))

struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  int64_t step = 1;  // 1-based step count after this update, for bias correction
  // When set, the step count is read from this device f32 scalar instead of `step` (AdamW keeps
  // it on the device so a step skipped on found_inf does not advance it; kernels/amp.h count_step).
  const float* step_count = nullptr;
  // As SgdParams::lr_device: lr is read as this f32 (decay and step size follow it).
  const float* lr_device = nullptr;
};

// PyTorch's AdamW: p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
FRUGAL_DECLARE_KERNEL(adamw_step,
                      (const Context& ctx, int64_t n, float* param, const float* grad,
                       float* exp_avg, float* exp_avg_sq, const AdamWParams& p,
                       const float* found_inf),
                      (ctx, n, param, grad, exp_avg, exp_avg_sq, p, found_inf))

}  // namespace frugal::kernels
