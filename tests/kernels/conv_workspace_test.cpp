// Note [Bounded conv workspace]: which convolution passes CUDA sends to cuDNN, the workspace each
// gets, and the meta device asking for the same bytes in a dry run that predicts CUDA.
#include "kernels/conv_workspace.h"

#include <gtest/gtest.h>

#include <vector>

#include "memory/step_trace.h"

namespace frugal::test {
namespace {

using kernels::ConvPass;
using kernels::cuda_conv_workspace_bytes;

kernels::Conv2dShape conv(int64_t n, int64_t hw, int64_t c, int64_t k, int64_t kernel,
                          int64_t stride, int64_t groups = 1) {
  kernels::Conv2dShape s;
  s.n = n, s.h = s.w = hw, s.c = c, s.k = k, s.kh = s.kw = kernel;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = kernel / 2;
  s.groups = groups;
  return s;
}

constexpr ConvPass kPasses[] = {ConvPass::forward, ConvPass::backward_input,
                                ConvPass::backward_weight};
constexpr size_t kMiB = size_t{1} << 20;

TEST(ConvWorkspace, PassesCudaRoutesAwayFromCudnnGetNone) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    for (ConvPass p : kPasses) {
      EXPECT_EQ(cuda_conv_workspace_bytes(p, t, conv(8, 56, 96, 96, 3, 1, 96)), 0u)
          << "depthwise (frugal's kernels)";
      EXPECT_EQ(cuda_conv_workspace_bytes(p, t, conv(8, 56, 32, 64, 1, 1)), 0u)
          << "pointwise (cuBLAS)";
      EXPECT_EQ(cuda_conv_workspace_bytes(p, t, conv(0, 56, 32, 64, 3, 1)), 0u) << "empty batch";
    }
    // A 1x1 with stride 2 is not a plain GEMM: cuDNN.
    EXPECT_GT(cuda_conv_workspace_bytes(ConvPass::forward, t, conv(8, 56, 32, 64, 1, 2)), 0u);
  }
  // A stem's 16-bit forward and weight gradient run frugal's few-channel kernels; f32's stay on
  // cuDNN, and so does the input gradient.
  const kernels::Conv2dShape stem = conv(8, 224, 3, 32, 3, 2);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f16, stem), 0u);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::bf16, stem), 0u);
  EXPECT_GT(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f32, stem), 0u);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, DType::f16, stem), 0u);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, DType::bf16, stem), 0u);
  EXPECT_GT(cuda_conv_workspace_bytes(ConvPass::forward, DType::f32, stem), 0u);
  EXPECT_GT(cuda_conv_workspace_bytes(ConvPass::backward_input, DType::f16, stem), 0u);
  // A 7x7 stem's f32 weight gradient leaves cuDNN for frugal's TF32 implicit GEMM, which takes
  // the same bound (Note [Stem weight gradients as GEMMs]); 16-bit ones, its other passes, 8
  // input channels and f32 without TF32 stay on cuDNN.
  kernels::Conv2dShape resnet_stem = conv(128, 224, 3, 64, 7, 2);
  EXPECT_TRUE(kernels::cuda::stem_gemm_handles(DType::f32, resnet_stem));
  EXPECT_FALSE(kernels::cuda_conv_uses_cudnn(ConvPass::backward_weight, DType::f32, resnet_stem));
  EXPECT_TRUE(
      kernels::cuda_conv_takes_workspace(ConvPass::backward_weight, DType::f32, resnet_stem));
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f32, resnet_stem),
            static_cast<size_t>(0.3 * static_cast<double>(size_t{128} * 112 * 112 * 64 * 4)));
  EXPECT_FALSE(kernels::cuda::stem_gemm_handles(DType::bf16, resnet_stem));
  EXPECT_TRUE(kernels::cuda_conv_uses_cudnn(ConvPass::backward_weight, DType::bf16, resnet_stem));
  EXPECT_TRUE(kernels::cuda_conv_uses_cudnn(ConvPass::forward, DType::f32, resnet_stem));
  EXPECT_FALSE(kernels::cuda::stem_gemm_handles(DType::f32, stem)) << "3x3: cuDNN's is fast";
  {
    kernels::Tf32Scope exact(false);
    EXPECT_FALSE(kernels::cuda::stem_gemm_handles(DType::f32, resnet_stem));
    EXPECT_TRUE(kernels::cuda_conv_uses_cudnn(ConvPass::backward_weight, DType::f32, resnet_stem));
    EXPECT_TRUE(
        kernels::cuda_conv_takes_workspace(ConvPass::backward_weight, DType::f32, resnet_stem));
  }
  EXPECT_FALSE(kernels::cuda::stem_gemm_handles(DType::f32, conv(128, 224, 3, 64, 11, 4)))
      << "11 rows x 3 blocks of 16 columns, over kStemMaxColumnBlocks";
  EXPECT_TRUE(kernels::cuda::stem_gemm_handles(DType::f32, conv(8, 64, 2, 16, 5, 1)));
  kernels::Conv2dShape dilated = conv(8, 64, 2, 16, 5, 1);
  dilated.dil_h = dilated.dil_w = 2;
  EXPECT_FALSE(kernels::cuda::stem_gemm_handles(DType::f32, dilated)) << "dilation: cuDNN";
  resnet_stem.c = 8;
  EXPECT_FALSE(kernels::cuda::stem_gemm_handles(DType::f32, resnet_stem));
  resnet_stem.c = 3;
  resnet_stem.groups = 3;
  resnet_stem.k = 63;
  EXPECT_FALSE(kernels::cuda::stem_gemm_handles(DType::f32, resnet_stem)) << "grouped";
}

TEST(ConvWorkspace, TheBoundIsAFractionOfTheLargerTensorAtLeast4MiBAtMost256MiB) {
  ASSERT_EQ(kernels::conv_workspace_scale(), 1.0) << "FRUGAL_CONV_WORKSPACE_SCALE is set";
  // ResNet-18's layer1 conv at batch 128, 224x224 input: x and y are 128x56x56x64, 49 MiB in f16.
  const kernels::Conv2dShape layer1 = conv(128, 56, 64, 64, 3, 1);
  const size_t larger = size_t{128} * 56 * 56 * 64 * 2;
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, DType::f16, layer1),
            static_cast<size_t>(1.6 * static_cast<double>(larger)));
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_input, DType::f16, layer1), larger / 4);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f16, layer1), 16 * kMiB)
      << "0.3 x 49 MiB is under the weight gradient's 16 MiB floor";
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f32, layer1),
            static_cast<size_t>(0.3 * static_cast<double>(2 * larger)));
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, DType::f32, layer1),
            static_cast<size_t>(1.6 * static_cast<double>(2 * larger)));
  // A stride-2 conv: the input is the larger.
  const kernels::Conv2dShape down = conv(64, 28, 128, 256, 3, 2);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, DType::f16, down),
            static_cast<size_t>(1.6 * static_cast<double>(size_t{64} * 28 * 28 * 128 * 2)));
  // Small tensors get the 4 MiB floor, a weight gradient 16 MiB or two f32 copies of its weights
  // (split-k partial sums).
  const kernels::Conv2dShape small = conv(1, 7, 512, 512, 3, 1);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, DType::f16, small), 4 * kMiB);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_input, DType::f16, small), 4 * kMiB);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f16, small),
            size_t{2} * 512 * 512 * 9 * 4);
  EXPECT_EQ(
      cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f16, conv(1, 7, 64, 64, 3, 1)),
      16 * kMiB);
  // A 16-bit weight gradient whose input channels are not a multiple of 8 also holds the input
  // padded to 8 channels (a 7x7 stride-2 conv of 6 channels at batch 128: 128x224x224x8 in
  // bf16); f32's bound does not change.
  kernels::Conv2dShape resnet_stem = conv(128, 224, 6, 64, 7, 2);
  const size_t stem_out = size_t{128} * 112 * 112 * 64;
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::bf16, resnet_stem),
            static_cast<size_t>(0.3 * static_cast<double>(2 * stem_out)) +
                size_t{128} * 224 * 224 * 8 * 2);
  resnet_stem.c = 3;
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f32, resnet_stem),
            static_cast<size_t>(0.3 * static_cast<double>(4 * stem_out)));
  resnet_stem.c = 8;
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::bf16, resnet_stem),
            static_cast<size_t>(0.3 * static_cast<double>(2 * stem_out)))
      << "8 input channels need no padded copy";
  // At most kConvWorkspaceCap.
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, DType::f32, conv(256, 224, 64, 64, 3, 1)),
            kernels::kConvWorkspaceCap);
}

// Note [Stride-2 stems as stride-1 convolutions]: a bf16 stem's forward and weight gradient
// take the rewritten input and weights, then the rewritten convolution's bound cut to keep the
// whole within the cap, in one allocation; the input gradient and f32 keep their own bounds.
TEST(ConvWorkspace, RewrittenStemsTakeTheRewriteThenItsBound) {
  const kernels::Conv2dShape stem = conv(128, 224, 3, 64, 7, 2);
  kernels::Conv2dShape inner;  // 4x4 over 16 channels of 115x115, stride 1, no padding
  inner.n = 128, inner.h = inner.w = 115, inner.c = 16, inner.k = 64, inner.kh = inner.kw = 4;
  const size_t z = size_t{128} * 115 * 115 * 16 * 2;  // 54,169,600: a multiple of 256
  const size_t w2 = 64 * 4 * 4 * 16 * 2;
  const DType t = DType::bf16;
  EXPECT_TRUE(kernels::cuda::space_to_depth_handles(t, stem));
  EXPECT_TRUE(kernels::cuda_conv_uses_cudnn(ConvPass::forward, t, stem));
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, t, inner), kernels::kConvWorkspaceCap)
      << "1.6 x y, capped";
  EXPECT_EQ(kernels::space_to_depth_inner_bound(ConvPass::forward, t, stem),
            kernels::kConvWorkspaceCap - z - w2);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, t, stem), kernels::kConvWorkspaceCap);
  EXPECT_EQ(
      cuda_conv_workspace_bytes(ConvPass::backward_weight, t, stem),
      z + w2 + static_cast<size_t>(0.3 * static_cast<double>(size_t{128} * 112 * 112 * 64 * 2)))
      << "0.3 of y; no padded copy, 16 channels";
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_input, t, stem),
            static_cast<size_t>(0.25 * static_cast<double>(size_t{128} * 112 * 112 * 64 * 2)))
      << "the input gradient is not rewritten";
  // At batch 1024 the rewritten input alone (433 MB) is over the cap: the inner convolution keeps
  // its floor, and only then does the whole go over.
  const kernels::Conv2dShape big = conv(1024, 224, 3, 64, 7, 2);
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::forward, DType::bf16, big),
            8 * z + w2 + (size_t{4} << 20));
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::bf16, big),
            8 * z + w2 + (size_t{16} << 20));
  EXPECT_FALSE(kernels::cuda::space_to_depth_handles(DType::f32, stem));
  EXPECT_FALSE(kernels::cuda::space_to_depth_handles(DType::f16, stem))
      << "f16: cuDNN's own stem is faster than the rewritten one";
  EXPECT_EQ(cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f16, stem),
            static_cast<size_t>(0.3 * static_cast<double>(size_t{128} * 112 * 112 * 64 * 2)) +
                size_t{128} * 224 * 224 * 8 * 2)
      << "f16: 0.3 of y and cuDNN's copy of x padded to 8 channels, as for any stem";
  EXPECT_FALSE(kernels::cuda::space_to_depth_handles(DType::bf16, conv(128, 224, 3, 32, 3, 2)))
      << "3x3: the few-channel kernels";
}

// The bytes of each conv_workspace allocation `run` makes on `device`, in order, and whether
// each was released within it.
std::vector<std::pair<size_t, bool>> conv_workspaces(Device device, const auto& run) {
  memory::StepRecorder rec(device);
  run();
  memory::StepTrace trace = rec.finish();
  std::vector<std::pair<size_t, bool>> out;
  for (const auto& a : trace.allocations) {
    if (a.category == memory::Category::conv_workspace) {
      out.emplace_back(a.bytes, a.end != memory::kStillLive);
    }
  }
  return out;
}

TEST(ConvWorkspace, MetaAsksForTheBoundOnlyWhenPredictingCuda) {
  const kernels::Conv2dShape s = conv(32, 28, 128, 128, 3, 1);
  const size_t bound = cuda_conv_workspace_bytes(ConvPass::backward_input, DType::f16, s);
  const kernels::Context meta = kernels::Context::of(Device::meta());
  auto ask = [&](const kernels::Context& ctx) {
    return conv_workspaces(ctx.device, [&] {
      kernels::meta_conv_workspace(ctx, ConvPass::backward_input, DType::f16, s);
    });
  };
  EXPECT_TRUE(ask(meta).empty()) << "a dry run for the CPU asks for nothing";
  {
    kernels::MetaPredictsCuda predicting;
    EXPECT_TRUE(kernels::meta_predicts_cuda());
    auto asked = ask(meta);
    ASSERT_EQ(asked.size(), 1u);
    EXPECT_EQ(asked[0].first, bound);
    EXPECT_TRUE(asked[0].second) << "released with the kernel's call";
    EXPECT_TRUE(ask(kernels::Context::of(Device::cpu())).empty()) << "only meta mirrors CUDA";
    kernels::MetaPredictsCuda not_now(false);
    EXPECT_TRUE(ask(meta).empty());
  }
  EXPECT_FALSE(kernels::meta_predicts_cuda());
}

TEST(ConvWorkspace, ThePlannerPlacesIt) {
  EXPECT_TRUE(memory::plannable(memory::Category::conv_workspace));
  EXPECT_FALSE(memory::plannable(memory::Category::workspace));
}

}  // namespace
}  // namespace frugal::test
