// The weight gradient of a convolution with few input channels (a network's stem: 1 or 3
// channels in, 3x3, stride 2) with frugal's own kernel, used by kernels/cuda/conv.cu instead of
// cuDNN for 16-bit shapes that few_channel_handles() accepts.
//
// Note [Few-channel weight gradients]: cuDNN's 16-bit weight-gradient kernels want channel
// counts in multiples of 8; with one input channel its benchmark picked an implicit-GEMM kernel
// "wo_smem" that took 0.51 ms of MobileNetV2's 7.0 ms f16 step at 32x32 (batch 256, H200), where
// the f32 stem's weight gradient took 0.04 ms (so conv.cu sends only 16-bit types here). The
// work is small: each thread owns one output channel and accumulates kh x kw x C products per
// output position (the C input channels of a tap are a broadcast load shared by the block), in
// row splits summed the way the depthwise weight gradient sums them (direct_conv_common.cuh).
#pragma once

#include "kernels/conv.h"
#include "kernels/conv_workspace.h"  // few_channel_handles: which shapes come here

namespace frugal::kernels::cuda {

// dw only, in dw_dtype (dtype or f32); the caller sums the bias gradient.
void few_channel_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                                 const Conv2dShape& s, const void* x, const void* dy, void* dw);

}  // namespace frugal::kernels::cuda
