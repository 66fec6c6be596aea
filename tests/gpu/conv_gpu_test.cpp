// CUDA vs CPU convolution: forward with and without bias, input gradient, weight and bias
// gradients, for 1x1 (cuBLAS GEMMs; with stride 2 on cuDNN), 3x3 pad 1, stride 2, dilation 2,
// groups 2, a non-square odd case (cuDNN), depthwise 3x3/5x5 with strides, dilation, packed
// and odd channel counts and a batch big enough for many weight-gradient splits, and 16-bit 3x3
// forwards and weight gradients with 1-4 input channels (frugal's own kernels: K in one block,
// over a block, not in packs of 8, odd; dilation, padding 0-2), f32 weight gradients of 5x5
// and 7x7 stems (frugal's TF32 kernel where TF32 is allowed, cuDNN otherwise), bf16 forwards
// and weight gradients of stride-2 stems rewritten as stride-1 convolutions (1, 3 and 4
// channels, odd sizes, unequal pads; f16 runs them on cuDNN as they are), in f32 (TF32 off, so
// 1e-5 holds), f16 and bf16; then f32 with TF32 allowed (PyTorch's default) within TF32's
// rounding.
#include "base/deterministic.h"
#include "gpu_test_util.h"
#include "kernels/conv.h"
#include "kernels/conv_workspace.h"
#include "kernels/cuda/runtime.h"
#include "memory/step_trace.h"

using namespace frugal;
using namespace frugal::gputest;

namespace {

kernels::Conv2dShape conv(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t kh,
                          int64_t kw, int64_t stride, int64_t pad_h, int64_t pad_w, int64_t dil,
                          int64_t groups) {
  kernels::Conv2dShape s;
  s.n = n, s.h = h, s.w = w, s.c = c, s.k = k, s.kh = kh, s.kw = kw;
  s.stride_h = s.stride_w = stride;
  s.pad_h = pad_h, s.pad_w = pad_w;
  s.dil_h = s.dil_w = dil;
  s.groups = groups;
  return s;
}

std::vector<kernels::Conv2dShape> configs() {
  return {
      conv(2, 7, 9, 8, 12, 1, 1, 1, 0, 0, 1, 1),       // 1x1 (cuBLAS)
      conv(4, 16, 17, 24, 40, 1, 1, 1, 0, 0, 1, 1),    // 1x1 (cuBLAS), 1,088 rows
      conv(2, 9, 9, 8, 16, 1, 1, 2, 0, 0, 1, 1),       // 1x1 stride 2 (cuDNN)
      conv(2, 9, 7, 6, 10, 3, 3, 1, 1, 1, 1, 1),       // 3x3 pad 1
      conv(2, 11, 9, 5, 7, 3, 3, 2, 1, 1, 1, 1),       // stride 2
      conv(2, 11, 10, 4, 6, 3, 3, 1, 2, 2, 2, 1),      // dilation 2
      conv(2, 8, 9, 8, 6, 3, 3, 1, 1, 1, 1, 2),        // groups 2
      conv(2, 9, 9, 16, 16, 3, 3, 1, 1, 1, 1, 16),     // depthwise stride 1
      conv(2, 10, 11, 8, 8, 3, 3, 2, 1, 1, 1, 8),      // depthwise stride 2
      conv(3, 5, 13, 3, 5, 5, 3, 1, 2, 1, 1, 1),       // odd, non-square kernel
      conv(2, 9, 10, 24, 24, 3, 3, 1, 1, 1, 1, 24),    // depthwise, packs of 4 channels
      conv(2, 11, 9, 40, 40, 5, 5, 2, 2, 2, 1, 40),    // depthwise 5x5 stride 2
      conv(2, 9, 8, 7, 7, 3, 3, 1, 2, 2, 2, 7),        // depthwise dilation 2, odd channels
      conv(2, 7, 7, 16, 16, 3, 3, 2, 0, 0, 1, 16),     // depthwise stride 2, no padding
      conv(2, 9, 12, 16, 16, 3, 3, 1, 0, 2, 1, 16),    // depthwise stride 1, pads 0 and 2
      conv(6, 29, 31, 32, 32, 3, 3, 1, 1, 1, 1, 32),   // depthwise, many weight-gradient splits
      conv(64, 66, 66, 32, 32, 3, 3, 1, 1, 1, 1, 32),  // depthwise, a batch that fills the device
      conv(2, 9, 13, 5, 5, 3, 3, 2, 1, 0, 1, 5),       // depthwise strips of odd channels, pad_w 0
      conv(2, 7, 7, 24, 24, 5, 5, 1, 2, 2, 1, 24),     // depthwise 5x5 stride 1, 7 wide: part strip
      conv(2, 9, 10, 16, 16, 3, 3, 1, 2, 2, 2, 16),    // depthwise dilation 2 in packs (per pixel)
      conv(2, 12, 17, 100, 100, 5, 5, 2, 2, 2, 1, 100),  // depthwise: two weight-gradient blocks
      conv(8, 32, 32, 1, 32, 3, 3, 2, 1, 1, 1, 1),       // few input channels: a 32x32 stem
      conv(2, 15, 13, 3, 20, 3, 3, 2, 1, 1, 1, 1),       // few input channels: a 3-channel stem
      conv(2, 9, 9, 2, 300, 3, 3, 1, 1, 1, 1, 1),        // few input channels, K over a block
      conv(3, 17, 19, 4, 40, 3, 3, 1, 0, 0, 1, 1),       // few: 4 channels, K = 40 in packs, no pad
      conv(2, 11, 10, 3, 24, 3, 3, 1, 2, 1, 2, 1),       // few: dilation 2, pads 2 and 1, K = 24
      conv(4, 57, 57, 3, 32, 3, 3, 2, 1, 1, 1, 1),   // few: splits of several tiles, a part tile
      conv(1, 9, 7, 3, 7, 3, 3, 1, 1, 1, 1, 1),      // few: K = 7, odd: channels stored one by one
      conv(3, 23, 21, 3, 16, 7, 7, 2, 3, 3, 1, 1),   // a 7x7 stem: f32 dw on TF32 wmma
      conv(2, 13, 15, 2, 8, 5, 5, 1, 2, 1, 2, 1),    // 5x5, dilation 2 (cuDNN), pads 2 and 1
      conv(2, 13, 15, 2, 8, 5, 5, 1, 2, 1, 1, 1),    // 5x5 stride 1 (wmma ldm 4), pads 2 and 1
      conv(2, 224, 224, 4, 8, 7, 7, 2, 3, 3, 1, 1),  // 4 channels, rows of 3.5 tiles, splits
      conv(2, 20, 18, 3, 72, 7, 7, 2, 3, 3, 1, 1),   // K = 72: two blocks of 64 channels
      conv(3, 10, 12, 1, 24, 5, 7, 1, 2, 3, 1, 1),   // one channel, a 5x7 kernel
      conv(2, 40, 41, 3, 16, 7, 7, 3, 3, 3, 1, 1),   // stride 3: fragment rows 12 floats apart
      conv(2, 13, 15, 1, 8, 5, 5, 2, 2, 1, 1, 1),    // bf16: space to depth, 1 channel, pads 2, 1
  };
}

// Every direction of every config against the CPU in dtype t, within `tol`.
void expect_matches_cpu(DType t, double tol) {
  for (const kernels::Conv2dShape& s : configs()) {
    SCOPED_TRACE(detail::str(dtype_name(t), " ", s.str()));
    int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
    int64_t nw = s.k * s.kh * s.kw * s.cin_per_group();
    auto x = random_values(static_cast<size_t>(nx), 21, t);
    auto w = random_values(static_cast<size_t>(nw), 22, t);
    auto bias = random_values(static_cast<size_t>(s.k), 23, t);
    auto dy = random_values(static_cast<size_t>(ny), 24, t);
    DeviceBuffer dxin = to_device(t, x), dw_in = to_device(t, w), dbias_in = to_device(t, bias),
                 ddy = to_device(t, dy);
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(with_bias ? "bias" : "no bias");
      std::vector<float> ref(static_cast<size_t>(ny));
      kernels::cpu::conv2d_forward(cpu(), DType::f32, s, x.data(), w.data(),
                                   with_bias ? bias.data() : nullptr, ref.data());
      DeviceBuffer dout(t, ny);
      dout.poison();
      kernels::cuda::conv2d_forward(gpu(), t, s, dxin.get(), dw_in.get(),
                                    with_bias ? dbias_in.get() : nullptr, dout.get());
      EXPECT_CLOSE(dout.download(), ref, tol);
    }
    {
      std::vector<float> ref(static_cast<size_t>(nx));
      kernels::cpu::conv2d_backward_input(cpu(), DType::f32, s, dy.data(), w.data(), ref.data());
      DeviceBuffer dout(t, nx);
      dout.poison();
      kernels::cuda::conv2d_backward_input(gpu(), t, s, ddy.get(), dw_in.get(), dout.get());
      EXPECT_CLOSE(dout.download(), ref, tol);
    }
    // dw and dbias in t, and for 16-bit t also straight in f32 (autocast's parameter grads).
    std::vector<DType> dw_types{t};
    if (t != DType::f32) dw_types.push_back(DType::f32);
    for (DType dw_t : dw_types) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(detail::str(with_bias ? "dbias" : "no dbias", ", dw in ", dw_t));
        std::vector<float> ref_w(static_cast<size_t>(nw)), ref_b(static_cast<size_t>(s.k));
        kernels::cpu::conv2d_backward_weight(cpu(), DType::f32, DType::f32, s, x.data(), dy.data(),
                                             ref_w.data(), with_bias ? ref_b.data() : nullptr);
        DeviceBuffer dgw(dw_t, nw), dgb(dw_t, s.k);
        dgw.poison();
        dgb.poison();
        kernels::cuda::conv2d_backward_weight(gpu(), t, dw_t, s, dxin.get(), ddy.get(), dgw.get(),
                                              with_bias ? dgb.get() : nullptr);
        EXPECT_CLOSE(dgw.download(), ref_w, tol);
        if (with_bias) EXPECT_CLOSE(dgb.download(), ref_b, tol);
      }
    }
  }
}

}  // namespace

TEST(GpuConv, ForwardAndBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  Tf32Scope exact(false);
  for (DType t : kDTypes) expect_matches_cpu(t, tolerance(t));
}

// TF32 rounds each product's inputs to 10 mantissa bits, as f16 does.
TEST(GpuConv, F32WithTf32MatchesCpuWithinTf32Rounding) {
  SKIP_WITHOUT_GPU();
  Tf32Scope tf32(true);
  expect_matches_cpu(DType::f32, tolerance(DType::f16));
}

// Deterministic mode keeps the input gradient of strided convolutions off cuDNN's TF32 kernel
// (racecheck reports races in it; tf32_for in kernels/cuda/conv.cu): with TF32 allowed, the
// result is bit for bit the full-f32 one; outside deterministic mode the flag stays in force.
TEST(GpuConv, DeterministicStridedInputGradientsRunInFullF32) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard fixed(true);
  for (const kernels::Conv2dShape& s :
       {conv(2, 11, 9, 5, 7, 3, 3, 2, 1, 1, 1, 1), conv(2, 9, 9, 8, 16, 1, 1, 2, 0, 0, 1, 1)}) {
    SCOPED_TRACE(s.str());
    const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
    DeviceBuffer dy = to_device(DType::f32, random_values(static_cast<size_t>(ny), 31, DType::f32));
    DeviceBuffer w = to_device(
        DType::f32, random_values(static_cast<size_t>(s.k * s.kh * s.kw * s.c), 32, DType::f32));
    auto input_grad = [&](bool tf32) {
      Tf32Scope scope(tf32);
      DeviceBuffer dx(DType::f32, nx);
      dx.poison();
      kernels::cuda::conv2d_backward_input(gpu(), DType::f32, s, dy.get(), w.get(), dx.get());
      return dx.download();
    };
    std::vector<float> full = input_grad(false), allowed = input_grad(true);
    ASSERT_EQ(full.size(), allowed.size());
    for (size_t i = 0; i < full.size(); ++i) {
      ASSERT_EQ(full[i], allowed[i]) << "element " << i << ": TF32 ran in deterministic mode";
    }
  }
}

// Note [Bounded conv workspace]: every pass of every config asks for exactly
// cuda_conv_workspace_bytes() as conv workspace (nothing where CUDA does not use cuDNN), on the
// first call (which benchmarks) and on the next, and for nothing larger than that.
TEST(GpuConv, EveryCudnnCallAsksForExactlyItsWorkspaceBound) {
  SKIP_WITHOUT_GPU();
  kernels::cuda::forget_conv_algorithms();  // the first calls below benchmark
  for (DType t : kDTypes) {
    for (const kernels::Conv2dShape& s : configs()) {
      SCOPED_TRACE(detail::str(dtype_name(t), " ", s.str()));
      const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
      const int64_t nw = s.k * s.kh * s.kw * s.cin_per_group();
      DeviceBuffer x = to_device(t, random_values(static_cast<size_t>(nx), 41, t));
      DeviceBuffer w = to_device(t, random_values(static_cast<size_t>(nw), 42, t));
      DeviceBuffer dy = to_device(t, random_values(static_cast<size_t>(ny), 43, t));
      DeviceBuffer y(t, ny), dx(t, nx), dw(t, nw);
      auto expect_bound = [&](kernels::ConvPass pass, const char* what, auto call) {
        const size_t bound = kernels::cuda_conv_workspace_bytes(pass, t, s);
        EXPECT_EQ(bound > 0, kernels::cuda_conv_takes_workspace(pass, t, s)) << what;
        for (int time = 0; time < 2; ++time) {
          memory::StepRecorder rec(Device::cuda(0));
          call();
          memory::StepTrace trace = rec.finish();
          std::vector<size_t> asked;
          for (const auto& a : trace.allocations) {
            if (a.category == memory::Category::conv_workspace) asked.push_back(a.bytes);
          }
          if (bound == 0) {
            EXPECT_TRUE(asked.empty()) << what << " call " << time;
          } else {
            EXPECT_EQ(asked, std::vector<size_t>{bound}) << what << " call " << time;
          }
          for (const auto& a : trace.allocations) {  // no cuDNN workspace of its own
            if (bound > 0 && a.category == memory::Category::workspace) {
              EXPECT_LT(a.bytes, size_t{4} << 20) << what << ": a workspace beside the bound";
            }
          }
        }
      };
      expect_bound(kernels::ConvPass::forward, "forward", [&] {
        kernels::cuda::conv2d_forward(gpu(), t, s, x.get(), w.get(), nullptr, y.get());
      });
      expect_bound(kernels::ConvPass::backward_input, "input gradient", [&] {
        kernels::cuda::conv2d_backward_input(gpu(), t, s, dy.get(), w.get(), dx.get());
      });
      expect_bound(kernels::ConvPass::backward_weight, "weight gradient", [&] {
        kernels::cuda::conv2d_backward_weight(gpu(), t, t, s, x.get(), dy.get(), dw.get(), nullptr);
      });
    }
  }
}

TEST(GpuConv, F64IsRejectedNamingTheOp) {
  SKIP_WITHOUT_GPU();
  kernels::Conv2dShape s = configs()[0];
  DeviceBuffer d(DType::f32, 4096);
  try {
    kernels::cuda::conv2d_forward(gpu(), DType::f64, s, d.get(), d.get(), nullptr, d.get());
    FAIL() << "f64 conv on CUDA did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CPU-only"), std::string::npos) << e.what();
  }
}
