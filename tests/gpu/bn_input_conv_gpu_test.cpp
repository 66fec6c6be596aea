// CUDA vs CPU: a convolution over x = act(bn(z)) computed from z and the statistics (Note [Batch
// norm inside the depthwise convolution] in kernels/conv.h), forward and weight gradient.
// Depthwise shapes with packs of channels (3x3 stride 1 in row windows; strips for stride 2 and
// 5x5) normalize z in the kernels' loads, one kernel per activation (relu, relu6); the padding must
// stay zero whatever act(beta) is. Odd channel counts, stride 3, silu, hardswish and a dense shape
// write x into a workspace first. f32, f16, bf16, with and without gamma and beta. Then the whole
// path through nn::functional on the GPU: a batch norm's output read by a depthwise conv is not
// written in forward, the step's outputs and gradients equal those of a written copy read by the
// plain kernels bit for bit, and an output still held is written by backward, before a step
// changes gamma.
#include <algorithm>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "gpu_test_util.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"
#include "nn/functional.h"

using namespace frugal;
using namespace frugal::gputest;
using kernels::Activation;

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

const kernels::Conv2dShape kShapes[] = {
    shape(2, 11, 16, 16, 3, 1, 16),  // depthwise row windows (3x3 stride 1), strips at edges
    shape(2, 20, 8, 8, 3, 1, 8),     // row windows with a strip inside the row
    shape(3, 12, 24, 24, 3, 2, 24),  // stride 2
    shape(2, 13, 40, 40, 5, 1, 40),  // 5x5
    shape(2, 9, 7, 7, 3, 1, 7),      // odd channels: x written into a workspace
    shape(2, 10, 8, 8, 3, 3, 8),     // stride 3: likewise
    shape(2, 8, 6, 10, 3, 1, 1),     // dense: likewise
};
constexpr Activation kActs[] = {Activation::relu, Activation::relu6, Activation::silu,
                                Activation::hardswish};

// One case's host values and their device copies.
struct BnConvCase {
  DType t;
  kernels::Conv2dShape s;
  bool affine;
  Activation act;
  std::vector<float> z, w, dy, mean, invstd, gamma, beta;
  DeviceBuffer dz, dw, ddy, dmean, dinvstd, dgamma, dbeta;

  BnConvCase(DType t_, const kernels::Conv2dShape& s_, bool affine_, Activation act_)
      : t(t_),
        s(s_),
        affine(affine_),
        act(act_),
        z(random_values(static_cast<size_t>(s.n * s.h * s.w * s.c), 51, t, -2.0f, 2.0f)),
        w(random_values(static_cast<size_t>(s.k * s.kh * s.kw * s.cin_per_group()), 57, t)),
        dy(random_values(static_cast<size_t>(s.n * s.oh() * s.ow() * s.k), 52, t)),
        mean(random_values(static_cast<size_t>(s.c), 53, DType::f32, -0.5f, 0.5f)),
        invstd(random_values(static_cast<size_t>(s.c), 54, DType::f32, 0.5f, 1.5f)),
        gamma(random_values(static_cast<size_t>(s.c), 55, DType::f32, 0.5f, 1.5f)),
        // beta > 0 everywhere: act(beta) would be nonzero in the padding if it were normalized
        beta(random_values(static_cast<size_t>(s.c), 56, DType::f32, 0.1f, 1.0f)),
        dz(to_device(t, z)),
        dw(to_device(t, w)),
        ddy(to_device(t, dy)),
        dmean(to_device(DType::f32, mean)),
        dinvstd(to_device(DType::f32, invstd)),
        dgamma(to_device(DType::f32, gamma)),
        dbeta(to_device(DType::f32, beta)) {}

  kernels::BnActInput device_input() {
    return {act, dmean.get(), dinvstd.get(), affine ? dgamma.get() : nullptr,
            affine ? dbeta.get() : nullptr};
  }
  // x = act(bn(z)) on the CPU, rounded to t as the forward stores it.
  std::vector<float> x() const {
    std::vector<float> x(z.size());
    kernels::cpu::batch_norm_act_apply(
        cpu(), DType::f32, act, s.n * s.h * s.w, s.c, z.data(), affine ? gamma.data() : nullptr,
        affine ? beta.data() : nullptr, mean.data(), invstd.data(), x.data());
    for (float& v : x) v = round_to(t, v);
    return x;
  }
  std::string name() const {
    return detail::str(dtype_name(t), " ", s.str(), affine ? " affine" : " no affine", " act ",
                       static_cast<int>(act));
  }
};

// Runs fn(c) for every case: dtype x shape x activation x with and without gamma and beta, each
// traced by its name.
template <typename Fn>
void for_each_case(Fn fn) {
  for (DType t : kDTypes) {
    for (const kernels::Conv2dShape& s : kShapes) {
      for (Activation act : kActs) {
        for (bool affine : {true, false}) {
          BnConvCase c(t, s, affine, act);
          SCOPED_TRACE(c.name());
          fn(c);
        }
      }
    }
  }
}

}  // namespace

TEST(GpuBnInputConv, ForwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Tf32Scope exact(false);
  for_each_case([](BnConvCase& c) {
    const DType t = c.t;
    const kernels::Conv2dShape& s = c.s;
    const std::vector<float> bias = random_values(static_cast<size_t>(s.k), 58, t);
    std::vector<float> ref(c.dy.size());
    kernels::cpu::conv2d_forward(cpu(), DType::f32, s, c.x().data(), c.w.data(), bias.data(),
                                 ref.data());
    DeviceBuffer dbias = to_device(t, bias), y(t, static_cast<int64_t>(ref.size()));
    y.poison();
    kernels::cuda::conv2d_forward_bn_act(gpu(), t, s, c.device_input(), c.dz.get(), c.dw.get(),
                                         dbias.get(), y.get());
    EXPECT_CLOSE(y.download(), ref, tolerance(t));
  });
}

// A NaN in z stays NaN through the loads' relu and relu6 (the 16-bit pairs clamp with the _nan
// max and min: Note [Clamps after rounding] in kernels/cuda/activation.cuh) and reaches exactly
// the outputs whose window holds it, as on the CPU; the output starts at zeros, so each NaN read
// back was written.
TEST(GpuBnInputConv, ANaNInTheInputReachesTheOutputsItsWindowsHold) {
  SKIP_WITHOUT_GPU();
  Tf32Scope exact(false);
  for (DType t : kDTypes) {
    for (const kernels::Conv2dShape& s : {kShapes[0], kShapes[2], kShapes[3], kShapes[4]}) {
      for (Activation act : {Activation::relu, Activation::relu6}) {
        BnConvCase c(t, s, true, act);
        SCOPED_TRACE(c.name());
        c.z[static_cast<size_t>(((0 * s.h + 3) * s.w + 4) * s.c + 5)] = NAN;  // n 0, (3, 4), c 5
        c.dz.upload(c.z);
        const std::vector<float> bias(static_cast<size_t>(s.k), 0.0f);
        std::vector<float> ref(c.dy.size());
        kernels::cpu::conv2d_forward(cpu(), DType::f32, s, c.x().data(), c.w.data(), bias.data(),
                                     ref.data());
        ASSERT_TRUE(std::any_of(ref.begin(), ref.end(), [](float v) { return std::isnan(v); }));
        DeviceBuffer dbias = to_device(t, bias), y = to_device(t, std::vector<float>(ref.size()));
        kernels::cuda::conv2d_forward_bn_act(gpu(), t, s, c.device_input(), c.dz.get(), c.dw.get(),
                                             dbias.get(), y.get());
        EXPECT_CLOSE_KEEPING_SPECIALS(y.download(), ref, tolerance(t));
      }
    }
  }
}

TEST(GpuBnInputConv, WeightGradientMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Tf32Scope exact(false);
  for_each_case([](BnConvCase& c) {
    const DType t = c.t;
    const kernels::Conv2dShape& s = c.s;
    const int64_t nw = static_cast<int64_t>(c.w.size());
    std::vector<float> ref_w(c.w.size()), ref_b(static_cast<size_t>(s.k));
    kernels::cpu::conv2d_backward_weight(cpu(), DType::f32, DType::f32, s, c.x().data(),
                                         c.dy.data(), ref_w.data(), ref_b.data());
    std::vector<DType> dw_types{t};
    if (t != DType::f32) dw_types.push_back(DType::f32);
    for (DType dw_t : dw_types) {
      DeviceBuffer dw(dw_t, nw), db(dw_t, s.k);
      dw.poison();
      db.poison();
      kernels::cuda::conv2d_backward_weight_bn_act(gpu(), t, dw_t, s, c.device_input(), c.dz.get(),
                                                   c.ddy.get(), dw.get(), db.get());
      EXPECT_CLOSE(dw.download(), ref_w, tolerance(t));
      EXPECT_CLOSE(db.download(), ref_b, tolerance(t));
    }
  });
}

namespace {

namespace F = frugal::nn::functional;

struct ChainResult {
  std::vector<double> y, dz, dw, dgamma, dbeta;
  std::vector<double> x_after_step;  // the batch norm's output, read after gamma changed
  bool x_written = false;            // before backward
};

// batch_norm(z) -> depthwise conv on the GPU, forward and backward; `plain` hands the conv x * 1
// instead (the same values, written, without the batch norm's recipe), so that neither its
// forward nor its weight gradient reads z: the reference.
ChainResult bn_depthwise_chain(DType t, Activation act, int64_t stride, bool plain) {
  Generator gen(11);
  const Device gpu_dev = Device::cuda(0);
  Tensor z = randn({4, 14, 14, 32}, gen).to(t).to(gpu_dev).requires_grad_(true);
  Tensor w = randn({32, 3, 3, 1}, gen).to(t).to(gpu_dev).requires_grad_(true);
  Tensor gamma = rand({32}, gen, {}, 0.5, 1.5).to(gpu_dev).requires_grad_(true);
  Tensor beta = randn({32}, gen).to(gpu_dev).requires_grad_(true);
  Tensor x = F::batch_norm(z, gamma, beta, Tensor(), Tensor(), {.activation = act});
  EXPECT_NE(x.deferred_write(), nullptr) << "a training batch norm defers its output";
  const Tensor conv_in = plain ? mul(x, 1.0) : x;
  Tensor y = F::conv2d(conv_in, w, Tensor(), {.stride = stride, .padding = 1, .groups = 32});
  ChainResult r;
  r.x_written = x.deferred_write() == nullptr;
  Tensor probe = randn(y.shape(), gen).to(t).to(gpu_dev);
  sum(mul(y, probe)).backward();
  {
    autograd::NoGradGuard no_grad;
    copy_(gamma, full({32}, 3.0));  // as a step would: backward must have written x before
  }
  r.x_after_step = x.to_vector();
  r.y = y.to_vector();
  r.dz = z.grad().to_vector();
  r.dw = w.grad().to_vector();
  r.dgamma = gamma.grad().to_vector();
  r.dbeta = beta.grad().to_vector();
  return r;
}

}  // namespace

TEST(GpuBnInputConv, TheUnwrittenOutputTrainsAsTheWrittenOneBitForBit) {
  SKIP_WITHOUT_GPU();
  for (DType t : kDTypes) {
    for (Activation act : {Activation::relu, Activation::relu6}) {
      for (int64_t stride : {1, 2}) {
        SCOPED_TRACE(
            detail::str(dtype_name(t), " act ", static_cast<int>(act), " stride ", stride));
        ChainResult fused = bn_depthwise_chain(t, act, stride, false);
        ChainResult plain = bn_depthwise_chain(t, act, stride, true);
        EXPECT_FALSE(fused.x_written) << "the depthwise conv normalized z in its loads";
        EXPECT_TRUE(plain.x_written);
        EXPECT_EQ(fused.y, plain.y);
        EXPECT_EQ(fused.dz, plain.dz);
        EXPECT_EQ(fused.dw, plain.dw);
        EXPECT_EQ(fused.dgamma, plain.dgamma);
        EXPECT_EQ(fused.dbeta, plain.dbeta);
        EXPECT_EQ(fused.x_after_step, plain.x_after_step) << "backward wrote the held output";
      }
    }
  }
}
