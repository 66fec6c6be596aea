// Depthwise convolution (groups == C == K) in NHWC with frugal's own kernels, used by
// kernels/cuda/conv.cu instead of cuDNN for the shapes depthwise_handles() accepts.
//
// Note [Depthwise kernels]: cuDNN's legacy API (the one conv.cu uses) reaches only its
// grouped-direct kernels for most NHWC depthwise shapes; in a profile of MobileNetV2's 224x224
// training step on an H200 they took 54 of 88 ms in f32 and 47 of 75 ms in bf16, against about
// 4 ms for the depthwise kernels PyTorch reaches through cuDNN's graph API. The work is memory
// bound, so the kernels are built to load each byte few times and keep many loads in flight:
// - Forward and input gradient: a thread owns a pack of 4 channels (16 bytes in f32, 8 in 16-bit
//   types) and a strip of 8 neighbouring pixels of one row, and walks the kernel a row at a time:
//   8 x 4 f32 accumulators and one row of weights (transposed to [taps, C] f32 first, so a warp
//   reads them as consecutive bytes) in registers, each input column loaded once a strip (the
//   strip's columns at compile-time offsets, clamped into the row and zeroed past it, so the
//   loads need no branch). The input gradient gathers dy with the taps' roles mirrored; for
//   stride 2 its strips start where iw + pw is even, so every strip has the same tap parities.
// - The 3x3 forward at stride 1 walks a strip down several output rows instead, the three
//   input rows it reads held in registers, so each input row is loaded (and batch norm applied
//   to it) once a window rather than three times (Note [Row windows] in depthwise_windows.cuh).
// - Weight gradient: a thread owns a pack, one kernel row (K x 4 accumulators, the 5x5 as cheap
//   as the 3x3) and a strip, so each x column and dy pixel is loaded once a strip; strips are
//   spread over row splits, each block sums its rows and writes f32 partials [split, C, taps],
//   then a second pass adds the splits in a fixed order (deterministic, no atomics).
// - Stride over 2 or dilation along W: one pixel a thread (the strips' column maps are fixed at
//   compile time); channel counts not divisible by 4 or misaligned pointers: 1 channel a thread.
// The per-pixel kernels they replace reloaded 9 (25) inputs and 18 (50) float4 weights per
// output pack and summed 528 splits one thread a weight: on MobileNetV1's 13 depthwise layers
// (f16, batch 128, 224x224) they took 0.84 / 1.53 / 2.01 ms (forward / input / weight
// gradient) against cuDNN's 0.55 / 1.05 / 0.60 through PyTorch.
#pragma once

#include <initializer_list>

#include "kernels/conv.h"
#include "kernels/conv_workspace.h"  // depthwise_handles: which shapes come here

namespace frugal::kernels::cuda {

// Whether the kernels below take z for x = act(bn(z)) (Note [Batch norm inside the depthwise
// convolution] in kernels/conv.h): depthwise_fuses_bn_act, and packs of 4 channels fit C, every
// pointer of the call and the statistics.
bool depthwise_reads_bn_act(DType dtype, const Conv2dShape& s, const BnActInput& in,
                            std::initializer_list<const void*> pointers);

// With `bn` (where depthwise_reads_bn_act), x is that z: each loaded value becomes act(bn(z))
// rounded to dtype before it is multiplied, and the padding stays zero.
void depthwise_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                       const void* w, const void* bias, void* y, const BnActInput* bn = nullptr);
void depthwise_backward_input(const Context& ctx, DType dtype, const Conv2dShape& s, const void* dy,
                              const void* w, void* dx);
// dw only, in dw_dtype (dtype or f32); the caller sums the bias gradient.
void depthwise_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                               const Conv2dShape& s, const void* x, const void* dy, void* dw,
                               const BnActInput* bn = nullptr);

}  // namespace frugal::kernels::cuda
