// Depthwise forward and weight gradient a tile a block (Note [Depthwise tiles]), for
// depthwise_conv.cu: the shapes tiles_take() admits, in packs of 4 channels.
//
// Note [Depthwise tiles]
// The strip kernels (depthwise_conv.cu) load each input pixel from L1 or L2 once for every
// kernel row that reads it and 10/8 times along the row: 3.75 loads a pixel for 3x3, each of
// which, where batch norm's output is read through its input (Note [Batch norm inside the
// depthwise convolution] in kernels/conv.h), normalized and activated again. On MobileNetV2's f16
// step (batch 128, 224x224, H200) the fused forward strips ran at 0.5-1.1 TB/s and the fused weight
// gradient at 0.8-1.3: 2.3 of the step's 12.2 ms of kernel time for 1.6 GB, the depthwise family
// 2.7 ms over what its traffic costs at 4.8 TB/s.
// A block here stages the input of a tile of outputs (packs x output rows x strips, with the
// kernel's halo) in shared memory, each pixel loaded once and normalized once, rounded to T as
// the strips round it; the weight gradient stages the tile's dy beside it. The threads then walk
// the same strips as the strip kernels, with the same column maps and order of additions, out of
// shared memory. The forward takes one tile a block; the weight gradient's blocks walk tiles
// strided over row splits, sum their rows (Note [Block row sums]) and write f32 partials
// [split, C, taps] that the splits' finish adds in order, as the strips' do.
#pragma once

#include <cuda_runtime.h>

#include "kernels/conv.h"

namespace frugal::kernels::cuda {

// Stride 1 or 2, the same along H and W, no dilation, 3x3 or 5x5 (depthwise_handles), C a
// multiple of 4; the caller checks that the pointers hold packs of 4 channels.
bool tiles_take(const Conv2dShape& s);

// y = conv(x) + bias (bias may be null); with `bn`, x is z and each staged value is
// act(bn(z)) rounded to dtype.
void tiled_forward(const Context& ctx, cudaStream_t stream, DType dtype, const Conv2dShape& s,
                   const BnActInput* bn, const void* x, const float* wt, const void* bias,
                   void* y);

// dw (in dw_dtype: dtype or f32) from x (or z with `bn`) and dy.
void tiled_backward_weight(const Context& ctx, cudaStream_t stream, DType dtype, DType dw_dtype,
                           const Conv2dShape& s, const BnActInput* bn, const void* x,
                           const void* dy, void* dw);

}  // namespace frugal::kernels::cuda
