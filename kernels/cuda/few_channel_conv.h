// The forward and the weight gradient of a convolution with few input channels (a network's
// stem: 1 or 3 channels in, 3x3, stride 2) with frugal's own kernels, used by kernels/cuda/conv.cu
// instead of cuDNN for 16-bit shapes that few_channel_handles() accepts (Note [Few-channel
// forwards] in few_channel_conv.cu).
//
// Note [Few-channel weight gradients]: cuDNN's 16-bit weight-gradient kernels want channel
// counts in multiples of 8; with one input channel its benchmark picked an implicit-GEMM kernel
// "wo_smem" that took 0.51 ms of MobileNetV2's 7.0 ms f16 step at 32x32 (batch 256, H200), where
// the f32 stem's weight gradient took 0.04 ms (so conv.cu sends only 16-bit types here).
// It is a small GEMM, dw[k, m] = sum over output positions p of dy[p, k] * patch[p, m], with
// m = tap * C + c (OHWI) and the im2col patch built on the fly. A block of 256 threads owns 32
// output channels and strides over tiles of 128 positions: it stages the tile's dy and patch in
// shared memory as f32 (zero in the padding, past the last position and past K), then each warp
// sums 16 of the positions, a lane holding 4 channels x ceil(9C / 4) columns in registers; the
// warps' sums are added in a fixed order into the block's row split of an f32 workspace, and the
// splits are added in order as the depthwise weight gradient's are (direct_conv_common.cuh):
// deterministic, no atomics. The first kernel, one warp a position and 27 scalar loads a thread,
// took 1.43 ms for MobileNet's stem (batch 128, 224x224x3, K = 32, stride 2, f16, H200), cuDNN
// 0.21 ms in PyTorch; the tiled one takes 0.16 ms, the finish included (few_channel_conv.cu has
// the split measurements). Holding the next tile's loads in registers while summing the current
// one did not help (95 registers, 2 blocks a multiprocessor: 0.15 to 0.17 ms).
#pragma once

#include "kernels/conv.h"
#include "kernels/conv_workspace.h"  // few_channel_handles: which shapes come here

namespace frugal::kernels::cuda {

// y = conv(x, w) + bias (nullable), all in dtype: f16 or bf16.
void few_channel_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                         const void* w, const void* bias, void* y);

// dw only, in dw_dtype (dtype or f32); the caller sums the bias gradient.
void few_channel_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                                 const Conv2dShape& s, const void* x, const void* dy, void* dw);

}  // namespace frugal::kernels::cuda
