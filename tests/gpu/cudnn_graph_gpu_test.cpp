// cuDNN's graph API plans (Note [Graph API candidates] in kernels/cuda/cudnn_graph.h) against the
// CPU: the first 16 plans graph_plans lists for each pass of a few shapes (3x3 pad 1, stride 2, a
// 7x7 three-channel stem, groups 2, dilation 2, 1x1 stride 2), run on its own, in f32 (TF32 off),
// f16 and bf16. Each pass of each dtype must have at least one plan that runs: a descriptor built
// wrong (dimensions, NHWC strides, ids) makes every plan fail or miss the reference.
#include <cudnn.h>

#include "gpu_test_util.h"
#include "kernels/conv.h"
#include "kernels/cuda/cudnn_graph.h"
#include "kernels/cuda/handles.h"

using namespace frugal;
using namespace frugal::gputest;

namespace {

kernels::Conv2dShape conv(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t kh,
                          int64_t stride, int64_t pad, int64_t dil, int64_t groups) {
  kernels::Conv2dShape s;
  s.n = n, s.h = h, s.w = w, s.c = c, s.k = k, s.kh = s.kw = kh;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.dil_h = s.dil_w = dil;
  s.groups = groups;
  return s;
}

// The CPU's result of `pass` in f32: y, dx or dw.
std::vector<float> cpu_reference(kernels::ConvPass pass, const kernels::Conv2dShape& s,
                                 const std::vector<float>& x, const std::vector<float>& w,
                                 const std::vector<float>& dy) {
  const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
  const int64_t nw = s.k * s.kh * s.kw * s.cin_per_group();
  switch (pass) {
    case kernels::ConvPass::forward: {
      std::vector<float> y(static_cast<size_t>(ny));
      kernels::cpu::conv2d_forward(cpu(), DType::f32, s, x.data(), w.data(), nullptr, y.data());
      return y;
    }
    case kernels::ConvPass::backward_input: {
      std::vector<float> dx(static_cast<size_t>(nx));
      kernels::cpu::conv2d_backward_input(cpu(), DType::f32, s, dy.data(), w.data(), dx.data());
      return dx;
    }
    case kernels::ConvPass::backward_weight:
      break;
  }
  std::vector<float> dw(static_cast<size_t>(nw));
  kernels::cpu::conv2d_backward_weight(cpu(), DType::f32, DType::f32, s, x.data(), dy.data(),
                                       dw.data(), nullptr);
  return dw;
}

const char* pass_name(kernels::ConvPass pass) {
  switch (pass) {
    case kernels::ConvPass::forward:
      return "forward";
    case kernels::ConvPass::backward_input:
      return "input gradient";
    case kernels::ConvPass::backward_weight:
      return "weight gradient";
  }
  return "?";
}

}  // namespace

TEST(GpuCudnnGraph, EveryPlanMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Tf32Scope exact(false);
  const std::vector<kernels::Conv2dShape> shapes = {
      conv(2, 9, 7, 16, 24, 3, 1, 1, 1, 1),   // 3x3 pad 1
      conv(2, 11, 9, 8, 16, 3, 2, 1, 1, 1),   // stride 2
      conv(2, 23, 21, 3, 16, 7, 2, 3, 1, 1),  // a 7x7 three-channel stem
      conv(2, 8, 9, 16, 16, 3, 1, 1, 1, 2),   // groups 2
      conv(2, 11, 10, 8, 8, 3, 1, 2, 2, 1),   // dilation 2
      conv(2, 9, 9, 16, 32, 1, 2, 0, 1, 1),   // 1x1 stride 2
  };
  const kernels::ConvPass passes[] = {kernels::ConvPass::forward, kernels::ConvPass::backward_input,
                                      kernels::ConvPass::backward_weight};
  kernels::Context ctx = gpu();
  cudnnHandle_t h = kernels::cuda::cudnn_handle(ctx);
  for (DType t : kDTypes) {
    for (kernels::ConvPass pass : passes) {
      int ran = 0;
      for (const kernels::Conv2dShape& s : shapes) {
        SCOPED_TRACE(detail::str(dtype_name(t), " ", pass_name(pass), " ", s.str()));
        const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
        const int64_t nw = s.k * s.kh * s.kw * s.cin_per_group();
        auto x = random_values(static_cast<size_t>(nx), 31, t);
        auto w = random_values(static_cast<size_t>(nw), 32, t);
        auto dy = random_values(static_cast<size_t>(ny), 33, t);
        const std::vector<float> ref = cpu_reference(pass, s, x, w, dy);
        DeviceBuffer dx_in = to_device(t, x), dw_in = to_device(t, w), ddy = to_device(t, dy);
        const auto plans =
            kernels::cuda::graph_plans(h, pass, t, s, /*tf32=*/false, size_t{64} << 20, 16);
        for (const auto& plan : plans) {
          SCOPED_TRACE(detail::str("engine ", plan->engine()));
          DeviceBuffer out(t, static_cast<int64_t>(ref.size()));
          out.poison();
          DeviceBuffer workspace(DType::u8, static_cast<int64_t>(plan->workspace()) + 1);
          const void* xp = pass == kernels::ConvPass::backward_input ? out.get() : dx_in.get();
          const void* wp = pass == kernels::ConvPass::backward_weight ? out.get() : dw_in.get();
          const void* yp = pass == kernels::ConvPass::forward ? out.get() : ddy.get();
          const cudnnStatus_t st = plan->execute(h, xp, wp, yp, workspace.get());
          if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED) continue;  // conv.cu skips
          ASSERT_EQ(st, CUDNN_STATUS_SUCCESS) << cudnnGetErrorString(st);
          EXPECT_CLOSE(out.download(), ref, tolerance(t));
          ++ran;
        }
      }
      EXPECT_GT(ran, 0) << dtype_name(t) << " " << pass_name(pass) << ": no graph API plan ran";
    }
  }
}

TEST(GpuCudnnGraph, PlansRespectTheWorkspaceLimit) {
  SKIP_WITHOUT_GPU();
  kernels::Context ctx = gpu();
  cudnnHandle_t h = kernels::cuda::cudnn_handle(ctx);
  const kernels::Conv2dShape s = conv(8, 28, 28, 64, 64, 3, 1, 1, 1, 1);
  const auto all = kernels::cuda::graph_plans(h, kernels::ConvPass::forward, DType::f16, s, false,
                                              size_t{1} << 30, 64);
  ASSERT_FALSE(all.empty());
  size_t smallest = all.front()->workspace();
  for (const auto& p : all) smallest = std::min(smallest, p->workspace());
  for (const auto& p : kernels::cuda::graph_plans(h, kernels::ConvPass::forward, DType::f16, s,
                                                  false, smallest, 64)) {
    EXPECT_LE(p->workspace(), smallest);
  }
  EXPECT_TRUE(
      kernels::cuda::graph_plans(h, kernels::ConvPass::forward, DType::f16, s, false, smallest, 0)
          .empty());
}

// A configuration benchmarked on aligned tensors may have a graph plan first in its cached list;
// the same configuration on views 2 bytes off (plans assume 16) must still match the CPU, the
// plan giving way to the legacy API's candidates, and so must the aligned tensors after them.
TEST(GpuCudnnGraph, MisalignedViewsFallBackToTheLegacyApi) {
  SKIP_WITHOUT_GPU();
  const kernels::Conv2dShape s = conv(2, 23, 21, 8, 16, 7, 2, 3, 1, 1);
  const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
  const int64_t nw = s.k * s.kh * s.kw * s.cin_per_group();
  const DType t = DType::f16;
  auto x = random_values(static_cast<size_t>(nx), 41, t);
  auto w = random_values(static_cast<size_t>(nw), 42, t);
  std::vector<float> ref(static_cast<size_t>(ny));
  kernels::cpu::conv2d_forward(cpu(), DType::f32, s, x.data(), w.data(), nullptr, ref.data());
  DeviceBuffer dx = to_device(t, x), dw = to_device(t, w), y(t, ny);
  y.poison();
  kernels::cuda::conv2d_forward(gpu(), t, s, dx.get(), dw.get(), nullptr, y.get());
  EXPECT_CLOSE(y.download(), ref, tolerance(t));

  std::vector<float> shifted_x(1, 0.0f);  // one element first: the data starts 2 bytes in
  shifted_x.insert(shifted_x.end(), x.begin(), x.end());
  DeviceBuffer sx = to_device(t, shifted_x), sy(t, ny + 1);
  sy.poison();
  auto* x_view = static_cast<char*>(sx.get()) + 2;
  auto* y_view = static_cast<char*>(sy.get()) + 2;
  kernels::cuda::conv2d_forward(gpu(), t, s, x_view, dw.get(), nullptr, y_view);
  const std::vector<float> all = sy.download();
  EXPECT_CLOSE(std::vector<float>(all.begin() + 1, all.end()), ref, tolerance(t));

  // The views skip the plans without dropping them: aligned tensors run the cached list again.
  y.poison();
  kernels::cuda::conv2d_forward(gpu(), t, s, dx.get(), dw.get(), nullptr, y.get());
  EXPECT_CLOSE(y.download(), ref, tolerance(t));
}
