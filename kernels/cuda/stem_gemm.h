// The f32 weight gradient of a convolution with few input channels and a kernel larger than 3x3
// (ResNet's 7x7 stem) as an implicit GEMM on TF32 tensor cores; kernels/cuda/conv.cu sends the
// shapes that stem_gemm_handles() accepts here instead of cuDNN.
//
// Note [Stem weight gradients as GEMMs]: cuDNN's legacy heuristics offer one algorithm for the
// f32 weight gradient of ResNet-18's stem (x [128, 224, 224, 3], 64 filters 7x7 stride 2):
// wgrad_alg0_engine, with 3, 4 or 8 input channels alike and with any workspace up to 256 MiB
// (FRUGAL_CUDNN_LOG=1 prints "untimed (1 candidate)"; ResNet-18's other f32 weight gradients
// time algorithm 1 fastest). PyTorch reaches a tensor-core kernel through cuDNN's graph API. The
// gradient is a GEMM, dw[K, M] = dy[P, K]^T patch[P, M], over the P = N*OH*OW output positions,
// with the M = KH*KW*C columns of the im2col patch in dw's OHWI order.
//
// Building the patch in memory and handing chunks of it to cuBLAS passed the parity tests but
// bought nothing (H200, ResNet-18 f32 eager step: 8,663 img/s against 8,615 with cuDNN's
// algorithm 0): the stem's patch is 944 MB, written and read once each, and a GEMM with a
// 64 x 147 result and 210k-long sums leaves most of the device idle. Staging each tile's patch
// rows in shared memory instead (one thread a patch column, 147 x 32 loads a tile) took 1.33 ms
// for the stem, little under algorithm 0: the kernel waited on its loads.
//
// So nothing of the patch is built. A tile is 32 neighbouring positions of one output row; its
// patch rows all lie in a window of x of KH rows x (31 * SW + KW) pixels, about 1,450 floats for
// the stem (against 4,704 patch values), staged in shared memory with the channels padded to 4.
// In one kernel row r, the 4 * KW patch columns of position p are 4 * KW consecutive floats of
// the window starting at pixel p * SW: a 16-column block of them is a wmma matrix_b fragment
// read straight from the window with ldm = 4 * SW (its rows overlap; columns past the kernel or
// past C fall in sums that are dropped). A block of 256 threads owns 64 output channels and a
// run of tiles; a warp holds one 16-row block of dw and up to eight 16-column blocks in
// registers (the stem: 7 rows x 2 blocks, 14 blocks for 2 warps a row block), multiplying with
// wmma's 16x16x8 TF32 fragments. The next tile's loads (8 dy values and 4 pixels a thread) stay in
// flight in registers while the block multiplies the current one. Each block writes its sums to
// a split of an f32 workspace and the splits are added in order (direct_conv_common.cuh):
// deterministic.
//
// Measured on the H200 (ResNet-18's stem, batch 128, ncu): 2.18 ms while each fragment's window
// offset was divided out in the loop (issue-bound: 2.1 instructions a cycle, 53% of issue slots
// busy, 25% occupancy for 128 registers a thread); 1.48 ms with the offsets read from shared
// memory; the column form above took 1.33 ms. Both forms leave the f32 step at 8,750-8,770
// img/s against PyTorch's 8,680 (1.01x), where cuDNN's algorithm 0 left it at 0.99-1.00x.
// What is left is occupancy: two blocks a multiprocessor, 0.9 eligible warps a scheduler.
//
// TF32 only: with conv_allow_tf32() off (or before compute capability 8.0) cuDNN's algorithm 0
// runs instead; either way the pass takes the conv's bounded workspace (Note [Bounded conv
// workspace]), so the meta prediction and the planner see the same bytes.
#pragma once

#include "kernels/conv.h"
#include "kernels/conv_workspace.h"  // stem_gemm_handles: which shapes come here

namespace frugal::kernels::cuda {

// dw [K, KH, KW, C] in f32 from f32 x and dy, TF32 products; the caller sums the bias gradient.
void stem_gemm_backward_weight(const Context& ctx, const Conv2dShape& s, const float* x,
                               const float* dy, float* dw);

}  // namespace frugal::kernels::cuda
