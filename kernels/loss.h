// Softmax cross-entropy with label smoothing, row-wise over logits [N, C] with i64 labels [N].
// Logits are f32 or f64 (autocast runs losses in f32). Per-row results; the core reduces.
#pragma once

#include <cstdint>

#include "kernels/context.h"

namespace frugal::kernels {

// loss[i] = -(1 - s) * log p[i, y_i] - (s / C) * sum_j log p[i, j], p = softmax(logits[i]).
// lse[i] (logsumexp of the row) is saved for backward. A label outside [0, C) throws on the CPU
// and on CUDA sets the loss to NaN (it cannot throw from the device).
FRUGAL_DECLARE_KERNEL(cross_entropy_forward,
                      (const Context& ctx, DType dtype, int64_t n, int64_t c, const void* logits,
                       const int64_t* labels, double smoothing, void* loss, void* lse),
                      (ctx, dtype, n, c, logits, labels, smoothing, loss, lse))
// dlogits[i, j] = dloss[i] * (p[i, j] - (1 - s) * [j == y_i] - s / C)
FRUGAL_DECLARE_KERNEL(cross_entropy_backward,
                      (const Context& ctx, DType dtype, int64_t n, int64_t c, const void* logits,
                       const int64_t* labels, double smoothing, const void* lse, const void* dloss,
                       void* dlogits),
                      (ctx, dtype, n, c, logits, labels, smoothing, lse, dloss, dlogits))

}  // namespace frugal::kernels
