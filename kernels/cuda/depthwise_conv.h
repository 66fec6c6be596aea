// Depthwise convolution (groups == C == K) in NHWC with frugal's own kernels, used by
// kernels/cuda/conv.cu instead of cuDNN for the shapes depthwise_handles() accepts.
//
// Note [Depthwise kernels]: cuDNN's legacy API (the one conv.cu uses) reaches only its
// grouped-direct kernels for most NHWC depthwise shapes; in a profile of MobileNetV2's 224x224
// training step on an H200 they took 54 of 88 ms in f32 and 47 of 75 ms in bf16, against about
// 4 ms for the depthwise kernels PyTorch reaches through cuDNN's graph API. The work is memory
// bound and simple: each thread owns one pixel and a 16-byte pack of channels (forward and input
// gradient gather over the kh x kw taps, weights transposed to [taps, C] f32 first so that they
// load as packs too); the weight gradient sums over N x OH x OW in row splits into an f32
// workspace, then one pass adds the splits in a fixed order (deterministic, no atomics).
#pragma once

#include "kernels/conv.h"
#include "kernels/conv_workspace.h"  // depthwise_handles: which shapes come here

namespace frugal::kernels::cuda {

void depthwise_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                       const void* w, const void* bias, void* y);
void depthwise_backward_input(const Context& ctx, DType dtype, const Conv2dShape& s,
                              const void* dy, const void* w, void* dx);
// dw only, in dw_dtype (dtype or f32); the caller sums the bias gradient.
void depthwise_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                               const Conv2dShape& s, const void* x, const void* dy, void* dw);

}  // namespace frugal::kernels::cuda
