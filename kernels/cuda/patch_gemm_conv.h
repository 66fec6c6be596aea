// The 16-bit forward and weight gradient of a convolution with few input channels and a kernel
// larger than 3x3 (ResNet's 7x7 stem) as GEMMs over im2col patches built a chunk at a time;
// kernels/cuda/conv.cu sends the shapes that patch_gemm_handles() accepts here instead of cuDNN.
//
// Note [Few-channel stems as patch GEMMs]: cuDNN 9 has no fast bf16 kernel for ResNet-18's stem
// (x [128, 224, 224, 3], 64 filters 7x7 stride 2; H200, in PyTorch 2.11 and in frugal alike):
// its best forward took 0.90 ms and its best weight gradient 0.58 ms, where f16 took 0.29 and
// 0.30 (FRUGAL_CUDNN_LOG=1 over frugal's step, and a PyTorch probe). Padding the input to 4 or 8
// channels did not help bf16 (8 channels: 0.87 and 0.47 ms). Those two passes were 1.5 ms of the
// 7.2 ms replayed bf16 step, and bf16's step trailed f16's by about that difference.
//
// Both passes are GEMMs over the im2col patch, whose row p holds the kh * kw * c inputs that
// output position p reads, in the weights' OHWI order:
//   forward          y[p, k]  = sum over m of patch[p, m] * w[k, m]      (y is NHWC: rows p)
//   weight gradient  dw[k, m] = sum over p of dy[p, k] * patch[p, m]
// The whole patch is 49 times the input (488 MB for the stem in bf16), so it is built a chunk of
// positions at a time, FRUGAL_PATCH_CHUNK_MIB of rows (16 MiB by default: small enough to stay
// in the 50 MB L2 between its writer and the GEMM that reads it), and each chunk's GEMM runs on
// cuBLAS with f32 sums. The weight gradient's result is small ([k, columns], 64 x 152 for the
// stem) and its sums long: one GEMM a chunk ran on the two or three multiprocessors its result
// fills. So each chunk is cut into slices of kPatchSlicePositions (512) rows, one strided batched
// GEMM gives every slice [k, columns] f32 sums of its own, the next chunks add to them (beta 1),
// and a last kernel adds the slices in order: the result depends on the shape alone. Rows are
// padded with zero columns to a multiple of 8 (16 bytes), as are the forward's weights (copied
// into the workspace), so that cuBLAS can take its tensor-core kernels.
//
// The workspace is the chunk and the padded weights or the slices' sums, exactly
// cuda_conv_workspace_bytes() (Note [Bounded conv workspace]): 16 MiB for the stem rather than
// the 256 MiB bound its cuDNN forward had. The input gradient stays on cuDNN (a stem's input
// needs none).
#pragma once

#include "kernels/conv.h"
#include "kernels/conv_workspace.h"  // patch_gemm_handles: which shapes come here

namespace frugal::kernels::cuda {

// y = conv(x, w) in dtype (f16 or bf16); the caller adds the bias.
void patch_gemm_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                        const void* w, void* y);

// dw only, in dw_dtype (dtype or f32); the caller sums the bias gradient.
void patch_gemm_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                                const Conv2dShape& s, const void* x, const void* dy, void* dw);

}  // namespace frugal::kernels::cuda
