// Reductions along one dimension of a tensor seen as [outer, size, inner]: amax, argmax (first
// maximum; NaN counts as the maximum, as in PyTorch), softmax and log_softmax (max-subtracted),
// and their backward. Storage f32/f16/bf16 (f64 on the CPU); compute in float (double for f64).
#pragma once

#include <cstdint>

#include "kernels/context.h"

namespace frugal::kernels {

enum class DimOp : uint8_t { amax, argmax, softmax, log_softmax };

struct DimView {
  int64_t outer = 1, size = 1, inner = 1;
};

// amax: y is [outer, inner] of dtype; argmax: y is i64 [outer, inner]; softmax and log_softmax:
// y is like x. size may be 0 only for softmax and log_softmax.
FRUGAL_DECLARE_KERNEL(dim_reduce,
                      (const Context& ctx, DimOp op, DType dtype, const DimView& v, const void* x,
                       void* y),
                      (ctx, op, dtype, v, x, y))

// amax: dx = dy / (number of maxima) at every maximum of x, 0 elsewhere (x the input, y and dy
// [outer, inner]); softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy)
// (y the forward output, x unused). Not for argmax.
FRUGAL_DECLARE_KERNEL(dim_reduce_backward,
                      (const Context& ctx, DimOp op, DType dtype, const DimView& v, const void* x,
                       const void* y, const void* dy, void* dx),
                      (ctx, op, dtype, v, x, y, dy, dx))

}  // namespace frugal::kernels
