// The f32 weight gradient of a convolution with few input channels and a kernel larger than 3x3
// (ResNet's 7x7 stem), as im2col chunks and cuBLAS GEMMs; kernels/cuda/conv.cu sends the shapes
// that stem_gemm_handles() accepts here instead of cuDNN.
//
// Note [Stem weight gradients as GEMMs]: cuDNN's legacy heuristics offer one algorithm for the
// f32 weight gradient of ResNet-18's stem (x [128, 224, 224, 3], 64 filters 7x7 stride 2):
// wgrad_alg0_engine, 1.93 ms of the 15.4 ms f32 step on the H200, with 3, 4 or 8 input channels
// alike and with any workspace up to 256 MiB (FRUGAL_CUDNN_LOG=1 prints "untimed (1 candidate)").
// PyTorch reaches a tensor-core kernel through cuDNN's graph API. The gradient is a GEMM,
// dw[K, M] = dy[P, K]^T patch[P, M], over the P = N*OH*OW output positions with the
// M = KH*KW*C columns of the im2col patch in dw's OHWI order. The patch of all positions is large
// (944 MB for that stem), so it is built a chunk of positions at a time in the conv's bounded
// workspace (Note [Bounded conv workspace]; the same bound as the cuDNN call it replaces) and
// each chunk's GEMM adds into dw (beta 1 after the first). TF32 follows conv_allow_tf32() as the
// cuDNN path does; cuBLAS sums in a fixed order, so the result is deterministic.
#pragma once

#include "kernels/conv.h"
#include "kernels/conv_workspace.h"  // stem_gemm_handles: which shapes come here

namespace frugal::kernels::cuda {

// dw only, in f32 (s's inputs are f32); the caller sums the bias gradient.
void stem_gemm_backward_weight(const Context& ctx, const Conv2dShape& s, const float* x,
                               const float* dy, float* dw);

}  // namespace frugal::kernels::cuda
