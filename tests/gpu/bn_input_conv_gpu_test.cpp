// CUDA vs CPU: the weight gradient of a convolution over x = act(bn(z)) from z and the
// statistics (Note [Weight gradients through batch norm] in kernels/conv.h). Depthwise shapes
// recompute x in the depthwise kernels' loads (strips at stride 1 and 2, single pixels at stride
// 3, packs of 4 channels and odd counts, 3x3 and 5x5, padding that must stay zero whatever
// act(beta) is); a dense shape recomputes x into a workspace. f32, f16, bf16, with and without
// gamma and beta, dw in the input dtype and in f32.
#include "gpu_test_util.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"

using namespace frugal;
using namespace frugal::gputest;

namespace {

kernels::Conv2dShape shape(int64_t n, int64_t hw, int64_t c, int64_t k, int64_t kernel,
                           int64_t stride, int64_t groups) {
  kernels::Conv2dShape s;
  s.n = n, s.h = s.w = hw, s.c = c, s.k = k, s.kh = s.kw = kernel;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = kernel / 2;
  s.dil_h = s.dil_w = 1;
  s.groups = groups;
  return s;
}

}  // namespace

TEST(GpuBnInputConv, WeightGradientMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Tf32Scope exact(false);
  const kernels::Conv2dShape shapes[] = {
      shape(2, 11, 16, 16, 3, 1, 16),  // depthwise strips, stride 1, packs of 4
      shape(3, 12, 24, 24, 3, 2, 24),  // stride 2
      shape(2, 13, 40, 40, 5, 1, 40),  // 5x5
      shape(2, 9, 7, 7, 3, 1, 7),      // odd channels: one a thread
      shape(2, 10, 8, 8, 3, 3, 8),     // stride 3: single pixels
      shape(2, 8, 6, 10, 3, 1, 1),     // dense: x recomputed into a workspace
  };
  for (DType t : kDTypes) {
    for (const kernels::Conv2dShape& s : shapes) {
      for (bool affine : {true, false}) {
        SCOPED_TRACE(detail::str(dtype_name(t), " ", s.str(), affine ? " affine" : " no affine"));
        const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
        const int64_t nw = s.k * s.kh * s.kw * s.cin_per_group();
        const auto z = random_values(static_cast<size_t>(nx), 51, t, -2.0f, 2.0f);
        const auto dy = random_values(static_cast<size_t>(ny), 52, t);
        const auto mean = random_values(static_cast<size_t>(s.c), 53, DType::f32, -0.5f, 0.5f);
        const auto invstd = random_values(static_cast<size_t>(s.c), 54, DType::f32, 0.5f, 1.5f);
        const auto gamma = random_values(static_cast<size_t>(s.c), 55, DType::f32, 0.5f, 1.5f);
        // beta > 0 everywhere: relu6(beta) would be nonzero in the padding if it were recomputed
        const auto beta = random_values(static_cast<size_t>(s.c), 56, DType::f32, 0.1f, 1.0f);

        // CPU: x recomputed and rounded to t as the forward stores it, then the weight gradient
        std::vector<float> x(static_cast<size_t>(nx));
        kernels::cpu::batch_norm_act_apply(
            cpu(), DType::f32, kernels::Activation::relu6, s.n * s.h * s.w, s.c, z.data(),
            affine ? gamma.data() : nullptr, affine ? beta.data() : nullptr, mean.data(),
            invstd.data(), x.data());
        for (float& v : x) v = round_to(t, v);
        std::vector<float> ref_w(static_cast<size_t>(nw)), ref_b(static_cast<size_t>(s.k));
        kernels::cpu::conv2d_backward_weight(cpu(), DType::f32, DType::f32, s, x.data(), dy.data(),
                                             ref_w.data(), ref_b.data());

        DeviceBuffer dz = to_device(t, z), ddy = to_device(t, dy);
        DeviceBuffer dmean = to_device(DType::f32, mean), dinvstd = to_device(DType::f32, invstd);
        DeviceBuffer dgamma = to_device(DType::f32, gamma), dbeta = to_device(DType::f32, beta);
        const kernels::BnActInput in{kernels::Activation::relu6, dmean.get(), dinvstd.get(),
                                     affine ? dgamma.get() : nullptr,
                                     affine ? dbeta.get() : nullptr};
        std::vector<DType> dw_types{t};
        if (t != DType::f32) dw_types.push_back(DType::f32);
        for (DType dw_t : dw_types) {
          DeviceBuffer dw(dw_t, nw), db(dw_t, s.k);
          dw.poison();
          db.poison();
          kernels::cuda::conv2d_backward_weight_bn_act(gpu(), t, dw_t, s, in, dz.get(), ddy.get(),
                                                       dw.get(), db.get());
          EXPECT_CLOSE(dw.download(), ref_w, tolerance(t));
          EXPECT_CLOSE(db.download(), ref_b, tolerance(t));
        }
      }
    }
  }
}
