// Batch normalisation over the rows of an NHWC tensor viewed as [rows = N*H*W, C].
// x, y, dx, dy have `dtype`; gamma, beta, running statistics, saved statistics and parameter
// gradients are acc_dtype(dtype) (f32, or f64 in gradient checks): statistics are never low
// precision.
#pragma once

#include <cstdint>

#include "kernels/context.h"
#include "kernels/elementwise.h"

namespace frugal::kernels {

// Training: batch mean and biased variance per channel; y = (x - mean) * invstd * gamma + beta;
// save_mean/save_invstd [C] for backward; running_mean/var (nullable) updated with momentum,
// running_var with the unbiased variance, as PyTorch.
FRUGAL_DECLARE_KERNEL(batch_norm_forward_train,
                      (const Context& ctx, DType dtype, int64_t rows, int64_t c, const void* x,
                       const void* gamma, const void* beta, double eps, double momentum, void* y,
                       void* save_mean, void* save_invstd, void* running_mean, void* running_var),
                      (ctx, dtype, rows, c, x, gamma, beta, eps, momentum, y, save_mean,
                       save_invstd, running_mean, running_var))

// Evaluation: y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta.
FRUGAL_DECLARE_KERNEL(batch_norm_forward_eval,
                      (const Context& ctx, DType dtype, int64_t rows, int64_t c, const void* x,
                       const void* gamma, const void* beta, const void* running_mean,
                       const void* running_var, double eps, void* y),
                      (ctx, dtype, rows, c, x, gamma, beta, running_mean, running_var, eps, y))

// Backward of the training forward. dx (nullable), dgamma and dbeta (nullable) are overwritten.
FRUGAL_DECLARE_KERNEL(batch_norm_backward,
                      (const Context& ctx, DType dtype, int64_t rows, int64_t c, const void* x,
                       const void* dy, const void* gamma, const void* save_mean,
                       const void* save_invstd, void* dx, void* dgamma, void* dbeta),
                      (ctx, dtype, rows, c, x, dy, gamma, save_mean, save_invstd, dx, dgamma,
                       dbeta))

// Note [Batch norm with its activation]: y = act(bn(x)) in one pass, with the statistics saved,
// so that backward keeps x alone (the conv output) and recomputes the rest. The three kernels
// below are the lean path of nn::functional::batch_norm; the ones above are their identity cases.
// Within a kernel family, batch_norm_act_apply with the saved statistics reproduces the
// training forward's y bit for bit, so a recomputed tensor equals the one the forward returned.

// Training forward with an activation; otherwise as batch_norm_forward_train. y may be null: the
// statistics alone (save_mean and save_invstd then non-null), for a y that batch_norm_act_apply
// writes later (Note [Deferred writes] in core/tensor.h). batches_tracked (nullable): an i64
// counter on the same device, counted up by one with the statistics (BatchNorm's
// num_batches_tracked: launches of their own were 52 of the 713 kernels of MobileNetV2's CUDA
// training step).
FRUGAL_DECLARE_KERNEL(batch_norm_act_forward_train,
                      (const Context& ctx, DType dtype, Activation act, int64_t rows, int64_t c,
                       const void* x, const void* gamma, const void* beta, double eps,
                       double momentum, void* y, void* save_mean, void* save_invstd,
                       void* running_mean, void* running_var, int64_t* batches_tracked),
                      (ctx, dtype, act, rows, c, x, gamma, beta, eps, momentum, y, save_mean,
                       save_invstd, running_mean, running_var, batches_tracked))

// y = act((x - mean) * invstd * gamma + beta) from saved statistics (the recompute).
FRUGAL_DECLARE_KERNEL(batch_norm_act_apply,
                      (const Context& ctx, DType dtype, Activation act, int64_t rows, int64_t c,
                       const void* x, const void* gamma, const void* beta, const void* mean,
                       const void* invstd, void* y),
                      (ctx, dtype, act, rows, c, x, gamma, beta, mean, invstd, y))

// y = residual + act((x - mean) * invstd * gamma + beta), the normalized value rounded to dtype
// before the add: bit for bit batch_norm_act_apply followed by an add, without writing (and
// reading back) the batch norm's output (Note [Residual sums of deferred batch norms] in
// nn/batch_norm_deferred.h). residual has x's shape and dtype; y overlaps neither x nor residual.
FRUGAL_DECLARE_KERNEL(batch_norm_act_apply_add,
                      (const Context& ctx, DType dtype, Activation act, int64_t rows, int64_t c,
                       const void* x, const void* gamma, const void* beta, const void* mean,
                       const void* invstd, const void* residual, void* y),
                      (ctx, dtype, act, rows, c, x, gamma, beta, mean, invstd, residual, y))

// Backward of act(bn(x)) from x and the saved statistics: the activation's derivative is taken
// at the recomputed pre-activation u = bn(x), never stored. dx (nullable), dgamma and dbeta
// (nullable) are overwritten; beta may be null (0). dx may be dy itself (written in place).
FRUGAL_DECLARE_KERNEL(batch_norm_act_backward,
                      (const Context& ctx, DType dtype, Activation act, int64_t rows, int64_t c,
                       const void* x, const void* dy, const void* gamma, const void* beta,
                       const void* save_mean, const void* save_invstd, void* dx, void* dgamma,
                       void* dbeta),
                      (ctx, dtype, act, rows, c, x, dy, gamma, beta, save_mean, save_invstd, dx,
                       dgamma, dbeta))

}  // namespace frugal::kernels
