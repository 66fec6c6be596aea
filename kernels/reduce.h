// Reductions: sum to a broadcast-compatible shape (the backward of broadcasting, mean, sum over
// dims), row-wise argmax, and a whole-tensor non-finite check. Accumulation in acc_t.
#pragma once

#include <cstdint>

#include "kernels/elementwise.h"

namespace frugal::kernels {

// Describes y[out] = scale * sum of x over the dimensions where out has extent 1 and in does not.
// in and out have the same rank (out keeps reduced dims as 1).
struct Reduction {
  int ndim = 0;
  int64_t in_numel = 0;
  int64_t out_numel = 0;
  int64_t in_dims[kMaxDims] = {};
  int64_t out_dims[kMaxDims] = {};
};
// Throws when ranks differ, exceed kMaxDims, or an out extent is neither 1 nor the in extent.
Reduction make_reduction(const Shape& in, const Shape& out_keepdim);

FRUGAL_DECLARE_KERNEL(sum_to,
                      (const Context& ctx, DType dtype, const Reduction& r, const void* x,
                       double scale, void* y),
                      (ctx, dtype, r, x, scale, y))

// out[i] = argmax_j x[i, j] (first maximum) for a [rows, cols] matrix; out is i64.
FRUGAL_DECLARE_KERNEL(argmax_rows,
                      (const Context& ctx, DType dtype, int64_t rows, int64_t cols, const void* x,
                       int64_t* out),
                      (ctx, dtype, rows, cols, x, out))

}  // namespace frugal::kernels
