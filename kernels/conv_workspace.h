// How much workspace a convolution asks for on CUDA, known from its shape alone, so that the
// meta device can ask for the same bytes at the same moment (the memory estimate counts it and
// the step planner gives it a place in its arena).
//
// Note [Bounded conv workspace]
// cuDNN's algorithms differ in speed and in workspace, from none to hundreds of MiB, and which
// one runs is known only after benchmarking on the device. frugal bounds it instead of guessing:
//   - each cuDNN call of a pass (forward, input gradient, weight gradient) gets exactly
//     cuda_conv_workspace_bytes() of workspace, allocated once per call, benchmarking included,
//     and only algorithms that fit it are considered (kernels/cuda/conv.cu). The bound is a
//     fraction of the larger of the conv's input and output, by pass: 1.6 for the forward, 0.25
//     for the input gradient, 0.3 for the weight gradient, which also gets two f32 copies of its
//     weights (split-k partial sums) and at least 16 MiB; at least 4 MiB for the others, at most
//     256 MiB. They come from the algorithms cuDNN 9 picks on the H200 when allowed 256 MiB
//     (FRUGAL_CUDNN_LOG=1, ResNet-18 at batch 128, 224x224, f16 and f32): forwards take 0 to
//     1.5x the larger tensor (the 7x7 stem 245 MiB, 0.41 ms against 1.53 ms without; a 1x1
//     stride-2 1.5x; layer4 1.3x), input gradients none, weight gradients up to 17.3 MiB (1.9 f32
//     copies of layer4's weights) or 0.25x the larger tensor (the stem); a 16-bit weight
//     gradient whose input channels are not a multiple of 8 also gets the input's size padded
//     to 8 channels, the copy cuDNN's tensor-core kernels make. A bound just short of
//     one of these drops that call to an algorithm up to 15x slower (the step lost 10-29%);
//     twice the larger tensor for every pass kept the speed but was live at the peak of a
//     checkpointed ResNet-18 (+50 MiB, 5%);
//   - it is tagged Category::conv_workspace, which the planner places in its arena: every step
//     asks for the same bytes, the benchmarking step too, so nothing large is left cached;
//   - on meta, kernels run nothing: under MetaPredictsCuda the conv ops allocate and release the
//     same bytes where the CUDA kernel would (meta_conv_workspace), so a dry run's trace is the
//     device's (train::estimate_memory, train::trace_steps);
//   - passes CUDA routes elsewhere ask for none: 3x3/5x5 depthwise (frugal's kernels), pointwise
//     (cuBLAS, whose workspace is kCublasWorkspaceBytes, made once), and 16-bit weight gradients
//     of 3x3 convs with at most 4 input channels (frugal's kernel); f32 weight gradients of
//     few-channel stems larger than 3x3, on frugal's TF32 kernel, take the bound as cuDNN
//     would and keep their split sums in it (Note [Stem weight gradients as GEMMs]). bf16
//     forwards and weight gradients of stride-2 stems larger than 3x3 with at most 4 input
//     channels run on cuDNN rewritten (Note [Stride-2 stems as stride-1 convolutions]): their
//     workspace is the rewritten input and weights (or weight gradient), then the rewritten
//     convolution's bound, cut to keep the whole under the cap (space_to_depth_inner_bound), one
//     allocation; only a rewritten input larger than the cap less the floor goes over it.
// Where no algorithm fits the bound (none seen on the zoo), the call takes the smallest that
// fits the 256 MiB cap with a workspace of its own, outside the plan, and warns once.
// FRUGAL_CONV_WORKSPACE_SCALE=s multiplies the fractions (1 by default), for
// measuring what a larger workspace buys; FRUGAL_CUDNN_LOG=1 prints each benchmarked
// configuration's candidates with their workspace and time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "base/scoped_value.h"
#include "kernels/conv.h"

namespace frugal::kernels {

enum class ConvPass : uint8_t { forward, backward_input, backward_weight };

constexpr size_t kConvWorkspaceCap = size_t{256} << 20;

// Whether CUDA runs this pass of `s` in `dtype` through cuDNN.
bool cuda_conv_uses_cudnn(ConvPass pass, DType dtype, const Conv2dShape& s);
// Whether the pass gets the bounded conv workspace: the cuDNN passes, and the f32 stem weight
// gradients that keep their split sums in it (Note [Stem weight gradients as GEMMs]).
bool cuda_conv_takes_workspace(ConvPass pass, DType dtype, const Conv2dShape& s);
// FRUGAL_CONV_WORKSPACE_SCALE, read once (1 when unset).
double conv_workspace_scale();
// The workspace bytes a cuDNN call of this pass gets (Note [Bounded conv workspace]); 0 when
// the pass takes none (cuda_conv_takes_workspace) or the conv is empty.
size_t cuda_conv_workspace_bytes(ConvPass pass, DType dtype, const Conv2dShape& s);
// The bound of a rewritten stem's inner convolution (Note [Stride-2 stems as stride-1
// convolutions]): its own bound, cut so that the pass's whole workspace stays within
// kConvWorkspaceCap, but never under the pass's floor (4 MiB, 16 for the weight gradient).
size_t space_to_depth_inner_bound(ConvPass pass, DType dtype, const Conv2dShape& s);

// While alive, conv ops on meta tensors of this thread allocate and release the workspace the
// CUDA kernel would (Note [Bounded conv workspace]): a dry run that predicts a CUDA step.
class MetaPredictsCuda {
 public:
  explicit MetaPredictsCuda(bool on = true);

 private:
  ScopedValue<bool> set_;  // Note [Scoped thread-local settings]
};
bool meta_predicts_cuda();

// On a meta context under MetaPredictsCuda: allocates cuda_conv_workspace_bytes() and releases it.
void meta_conv_workspace(const Context& ctx, ConvPass pass, DType dtype, const Conv2dShape& s);

namespace cuda {
// The routes of kernels/cuda/conv.cu, by shape: frugal's depthwise kernels (Note [Depthwise
// kernels]), cuBLAS for pointwise convs (Note [Pointwise convolutions as GEMMs]), and the
// few-channel weight gradient (Note [Few-channel weight gradients]).
bool depthwise_handles(const Conv2dShape& s);
// Shapes and activations whose depthwise kernels read a batch norm's input z for their x =
// act(bn(z)) (Note [Batch norm inside the depthwise convolution] in kernels/conv.h):
// depthwise_handles, strips along W (stride 1 or 2, no dilation there), C a multiple of 4, and
// an activation cheap enough to apply at every load (depthwise_fuses_activation: relu, relu6).
bool depthwise_fuses_bn_act(const Conv2dShape& s, Activation act);
bool depthwise_fuses_activation(Activation act);
bool pointwise(const Conv2dShape& s);
bool few_channel_handles(const Conv2dShape& s);
// f32 weight gradients with TF32 allowed (conv_allow_tf32), one group, at most
// kFewChannelMaxInputs input channels, a kernel larger than 3x3 without dilation, at most
// kStemMaxColumnBlocks 16-column blocks and a window of at most kStemMaxWindow pixels (Note
// [Stem weight gradients as GEMMs] in kernels/cuda/stem_gemm.h).
bool stem_gemm_handles(DType dtype, const Conv2dShape& s);
constexpr int kFewChannelSize = 3;        // kh == kw
constexpr int kFewChannelMaxInputs = 4;   // kSize^2 x C running sums a thread, in registers
constexpr int kStemTile = 32;             // output positions of one row a tile
constexpr int kStemMaxColumnBlocks = 16;  // KH x ceil(KW / 4): two warps' eight fragments
constexpr int kStemMaxWindow = 1024;      // pixels of x a tile stages: four a thread
// 16-column blocks of dw a kernel row takes: four taps of four channels (C padded to 4) each.
constexpr int64_t stem_row_blocks(int64_t kw) { return (kw + 3) / 4; }
// Pixels of one input row a tile stages: the 32 positions' windows, and the last fragment's
// columns past the kernel (even, so that rows stay 32-byte aligned).
constexpr int64_t stem_window_width(int64_t stride_w, int64_t kw) {
  return (stride_w * (kStemTile - 1) + 4 * stem_row_blocks(kw) + 1) / 2 * 2;
}
// The channel multiple cuDNN's 16-bit tensor-core kernels take without padding the input.
constexpr int64_t kTensorCoreChannels = 8;
// bf16 forwards and weight gradients that cuDNN runs as stride-1 convolutions over the input's
// 2x2 blocks (Note [Stride-2 stems as stride-1 convolutions] in kernels/space_to_depth.h):
// space_to_depth_fits, and 32-bit indices for x, y and the rewritten input.
bool space_to_depth_handles(DType dtype, const Conv2dShape& s);
}  // namespace cuda

}  // namespace frugal::kernels
