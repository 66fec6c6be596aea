// A stride-2 convolution with few input channels (ResNet's 7x7 stem) rewritten as a stride-1
// convolution over the input's 2x2 blocks: the index arithmetic, shared by the CUDA kernels
// (kernels/cuda/space_to_depth_conv.cu), the workspace sizes (kernels/conv_workspace.cpp) and the
// CPU test that checks the rewrite against the convolution itself.
//
// Note [Stride-2 stems as stride-1 convolutions]: cuDNN 9 has no fast bf16 kernel for ResNet-18's
// stem (x [128, 224, 224, 3], 64 filters 7x7 stride 2; H200, in PyTorch 2.11 and in frugal
// alike): its best forward takes 0.90 ms and its best weight gradient 0.58 ms, where f16 takes
// 0.29 and 0.30, with 3, 4 or 8 input channels alike (bench/stem_probe.py). Those two passes are
// 1.5 ms of the 7.2 ms replayed bf16 step. Building im2col patches for cuBLAS did not pay: the
// patch builder alone took 1.08 ms (bench/RESULTS.md, session 29).
//
// Space to depth, as MLPerf's ResNet-50 stems do: z's pixel (r, q) holds x's 2x2 block at rows
// 2 (r + row_first) + b and columns 2 (q + col_first) + d, channel (2 b + d) c + ch, zero where
// that lies outside x and in the channels past 4 c (padded to a multiple of 8 for the tensor-core
// kernels). Writing the tap row i - pad_h = 2 a + b (a = floor((i - pad_h) / 2), b in {0, 1}),
// output row oh reads x's row 2 oh + 2 a + b, which is z's row oh + a - row_first, block row b.
// So y = conv(z, w2) with stride 1 and no padding, where w2 has ceil-ish (kh + 1) / 2 rows of taps,
// a - row_first for a from row_first = floor(-pad_h / 2) to floor((kh - 1 - pad_h) / 2), and w2's
// tap (ra, qb) at channel (2 b + d) c + ch is w's tap (2 (ra + row_first) + b + pad_h, ...), zero
// where that lies outside w. The stem becomes a 4x4 convolution over 16 channels (12 used), a
// shape cuDNN's implicit-GEMM kernels run like any ResNet layer, and z is 115 x 115 pixels (the
// output's 112 and the 3 extra rows and columns the 4x4 window reads), 54 MB for the stem in bf16.
// The weight gradient is the same rewrite backwards: dw2 = wgrad(z, dy), and dw's every element is
// one element of dw2 (the zero taps of w2 get gradients that are dropped). One difference from
// the convolution itself: a zero tap of w2 multiplies a real pixel of x (for the 7x7 stem, the
// row and column just before the window), so an Inf or NaN in x reaches one more output row and
// column than it would; finite inputs give the same sums.
// Measured (bench/RESULTS.md, session 30): cuDNN runs the rewritten bf16 stem in 0.35 + 0.24 ms
// and the rewrite of x takes 0.07 ms a pass; ResNet-18's replayed bf16 step went from 17,762 to
// 19,804 img/s. The rewritten f16 stem (0.33 + 0.24 ms) is slower than f16's own (0.29 + 0.30 ms)
// once x is rewritten, and the f16 step went from 20,129 to 19,730, so f16 keeps cuDNN's stem.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "base/half.h"  // FRUGAL_HD
#include "kernels/conv.h"

namespace frugal::kernels {

struct SpaceToDepth {
  Conv2dShape inner;      // z [n, oh + taps - 1, ow + taps - 1, 4c rounded up to 8], stride 1
  int64_t row_first = 0;  // floor(-pad_h / 2): z's row r starts at x's row 2 (r + row_first)
  int64_t col_first = 0;  // floor(-pad_w / 2)
};

// Stride 2 both ways, no dilation, one group, 1-4 input channels and a kernel larger than 3x3:
// the shapes the rewrite is meant for (3x3 stems have frugal's few-channel kernels).
bool space_to_depth_fits(const Conv2dShape& s);
// The rewrite of `s`, which must fit.
SpaceToDepth space_to_depth(const Conv2dShape& s);
// The workspace of a rewritten pass starts with z, then w2 (the forward) or dw2 (the weight
// gradient), each rounded up to 256 bytes; the rewritten convolution's own workspace follows.
size_t space_to_depth_input_bytes(DType dtype, const Conv2dShape& s);
size_t space_to_depth_weight_bytes(DType dtype, const Conv2dShape& s);

// Where z's channel ch2 of pixel (r, q) comes from in x: true with (ih, iw, ch), or false where z
// holds zero (outside x, or a padding channel). c is x's channel count.
FRUGAL_HD bool z_source(int c, int h, int w, int row_first, int col_first, int r, int q, int ch2,
                        int* ih, int* iw, int* ch) {
  if (ch2 >= 4 * c) return false;
  const int block = ch2 / c;  // 2 b + d
  *ch = ch2 - block * c;
  *ih = 2 * (r + row_first) + (block >> 1);
  *iw = 2 * (q + col_first) + (block & 1);
  return *ih >= 0 && *ih < h && *iw >= 0 && *iw < w;
}

// Where w2's channel ch2 of tap (ra, qb) comes from in w: true with (i, j, ch), or false where w2
// holds zero (a tap outside w's kernel, or a padding channel).
FRUGAL_HD bool w2_source(int c, int kh, int kw, int pad_h, int pad_w, int row_first, int col_first,
                         int ra, int qb, int ch2, int* i, int* j, int* ch) {
  if (ch2 >= 4 * c) return false;
  const int block = ch2 / c;
  *ch = ch2 - block * c;
  *i = 2 * (ra + row_first) + (block >> 1) + pad_h;
  *j = 2 * (qb + col_first) + (block & 1) + pad_w;
  return *i >= 0 && *i < kh && *j >= 0 && *j < kw;
}

}  // namespace frugal::kernels
