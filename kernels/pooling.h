// Max, average and global average pooling over NHWC tensors.
#pragma once

#include <cstdint>

#include "kernels/context.h"
#include "kernels/conv.h"  // Conv2dShape::out_extent

namespace frugal::kernels {

struct Pool2dShape {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input [N, H, W, C]
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average pooling only, PyTorch's default
  // 0 when the padded input is smaller than the window (Conv2dShape::out_extent's reason).
  int64_t oh() const { return Conv2dShape::out_extent(h + 2 * pad_h - kh, stride_h); }
  int64_t ow() const { return Conv2dShape::out_extent(w + 2 * pad_w - kw, stride_w); }
};

// Padding never wins a max. Backward finds the (first) argmax again from x instead of saving
// indices, and routes dy there (accumulating when windows overlap). dx overwritten.
// On CUDA the backward records each window's argmax once in kernel scratch of
// cuda_max_pool_backward_scratch_bytes(s), one byte per output (two for windows past 254
// positions); a dry run on meta that predicts a CUDA step asks for the same.
inline size_t cuda_max_pool_backward_scratch_bytes(const Pool2dShape& s) {
  const size_t per_output = s.kh * s.kw < 255 ? 1 : 2;
  return static_cast<size_t>(s.n * s.oh() * s.ow() * s.c) * per_output;
}
FRUGAL_DECLARE_KERNEL(max_pool2d_forward,
                      (const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                       void* y),
                      (ctx, dtype, s, x, y))
FRUGAL_DECLARE_KERNEL(max_pool2d_backward,
                      (const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                       const void* dy, void* dx),
                      (ctx, dtype, s, x, dy, dx))
FRUGAL_DECLARE_KERNEL(avg_pool2d_forward,
                      (const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                       void* y),
                      (ctx, dtype, s, x, y))
FRUGAL_DECLARE_KERNEL(avg_pool2d_backward,
                      (const Context& ctx, DType dtype, const Pool2dShape& s, const void* dy,
                       void* dx),
                      (ctx, dtype, s, dy, dx))

// y[N, C] = mean over H*W of x[N, H*W, C]; backward spreads dy / (H*W).
FRUGAL_DECLARE_KERNEL(global_avg_pool_forward,
                      (const Context& ctx, DType dtype, int64_t n, int64_t hw, int64_t c,
                       const void* x, void* y),
                      (ctx, dtype, n, hw, c, x, y))
FRUGAL_DECLARE_KERNEL(global_avg_pool_backward,
                      (const Context& ctx, DType dtype, int64_t n, int64_t hw, int64_t c,
                       const void* dy, void* dx),
                      (ctx, dtype, n, hw, c, dy, dx))

}  // namespace frugal::kernels
