// Loss-scaling kernels (optim/grad_scaler.h): fused unscale + non-finite check, the one-thread
// scale update, and a step counter that does not advance on a skipped step. Scale, growth
// tracker, step counter and found_inf are f32 scalars on ctx.device: nothing is read back.
#pragma once

#include <cstdint>

#include "kernels/context.h"

namespace frugal::kernels {

// grad[i] *= 1 / *scale for i < n, in place; sets *found_inf = 1 if any grad[i] (as given) is
// inf or NaN, and otherwise leaves *found_inf as it was (so one flag covers many tensors).
FRUGAL_DECLARE_KERNEL(unscale_and_check,
                      (const Context& ctx, int64_t n, float* grad, const float* scale,
                       float* found_inf),
                      (ctx, n, grad, scale, found_inf))

// unscale_and_check over `count` tensors at once (grads[t] has sizes[t] elements; host arrays
// of device pointers): GradScaler::unscale_ launches once per few dozen gradients instead of once
// per gradient, which matters when the host, not the device, bounds a step.
FRUGAL_DECLARE_KERNEL(unscale_and_check_many,
                      (const Context& ctx, int64_t count, float* const* grads, const int64_t* sizes,
                       const float* scale, float* found_inf),
                      (ctx, count, grads, sizes, scale, found_inf))

// dsts[t][i] = srcs[t][i] rounded to `to` (f16 or bf16) for i < sizes[t], t < count (host arrays
// of device pointers), a few dozen tensors per launch: autocast lowers a forward's f32 parameters
// together instead of one cast launch each (Note [Autocast cache] in core/autocast.h).
FRUGAL_DECLARE_KERNEL(lower_many,
                      (const Context& ctx, DType to, int64_t count, const float* const* srcs,
                       void* const* dsts, const int64_t* sizes),
                      (ctx, to, count, srcs, dsts, sizes))

// PyTorch's _amp_update_scale_: on *found_inf != 0, scale *= backoff and tracker = 0; otherwise
// tracker += 1 and, when it reaches growth_interval, scale *= growth (if still finite) and
// tracker = 0. growth_tracker holds a whole number in f32 (exact below 2^24 steps).
FRUGAL_DECLARE_KERNEL(update_scale,
                      (const Context& ctx, float* scale, float* growth_tracker,
                       const float* found_inf, double growth_factor, double backoff_factor,
                       int64_t growth_interval),
                      (ctx, scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                       growth_interval))

// *step += 1 unless found_inf (nullable) is non-zero: AdamW's bias-correction count, kept on
// the device so a skipped step does not advance it without a host read.
FRUGAL_DECLARE_KERNEL(count_step, (const Context& ctx, float* step, const float* found_inf),
                      (ctx, step, found_inf))

}  // namespace frugal::kernels
