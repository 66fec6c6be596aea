// Note [Batch norm inside the depthwise convolution] (kernels/conv.h): a depthwise conv whose
// input is a batch norm's output gets its weight gradient from the batch norm's input and
// statistics (relu, relu6) or from its recipe (the other activations); either way the result is
// the one a kept input gives, bit for bit, in f32 and bf16.
#include <gtest/gtest.h>

#include <utility>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"
#include "nn/functional.h"

using namespace frugal;
namespace F = frugal::nn::functional;
using F::Activation;

namespace {

struct Case {
  Activation act;
  DType dtype;
};

// dw of a depthwise conv over act(bn(z)), computed through the batch norm (`through`) or from a
// leaf copy of its output (the weight gradient any kept input gives).
std::vector<double> depthwise_weight_grad(const Case& c, bool through) {
  Generator gen(7);
  Tensor z = randn({2, 9, 7, 8}, gen).to(c.dtype).requires_grad_(true);
  Tensor w = randn({8, 3, 3, 1}, gen).to(c.dtype).requires_grad_(true);
  Tensor gamma = rand({8}, gen, {}, 0.5, 1.5), beta = randn({8}, gen);
  Tensor x = F::batch_norm(z, gamma, beta, Tensor(), Tensor(), {.activation = c.act});
  if (!through) x = x.detach().requires_grad_(true);
  Tensor y = F::conv2d(x, w, Tensor(), {.stride = 2, .padding = 1, .groups = 8});
  Tensor probe = randn(y.shape(), gen).to(c.dtype);
  sum(mul(y, probe)).backward();
  return w.grad().to(DType::f64).to_vector();
}

}  // namespace

TEST(BnInputWeightGrad, EqualsTheKeptInputsBitForBit) {
  for (Activation act : {Activation::relu, Activation::relu6, Activation::hardswish,
                         Activation::silu, Activation::identity}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Case c{act, dtype};
      SCOPED_TRACE(testing::Message() << "activation " << static_cast<int>(act) << ", " << dtype);
      std::vector<double> through = depthwise_weight_grad(c, true);
      std::vector<double> kept = depthwise_weight_grad(c, false);
      EXPECT_EQ(through, kept);
      double norm = 0;
      for (double v : through) norm += v * v;
      EXPECT_GT(norm, 0.0) << "a zero gradient would pass trivially";
    }
  }
}

TEST(BnInputWeightGrad, OnlyBatchNormRecipesAreRecognised) {
  EXPECT_EQ(F::batch_norm_recipe_activation("batch_norm+relu6"), Activation::relu6);
  EXPECT_EQ(F::batch_norm_recipe_activation("batch_norm"), Activation::identity);
  EXPECT_FALSE(F::batch_norm_recipe_activation("conv2d").has_value());
  EXPECT_FALSE(F::batch_norm_recipe_activation("batch_norm+gelu").has_value());
}

// The CPU kernel entry against its definition: the weight gradient of x = act(bn(z)) recomputed
// first, for a depthwise shape and a dense one, with gamma and beta and without (null: 1 and 0).
// CUDA's fused loads against the CPU: tests/gpu/bn_input_conv_gpu_test.cpp.
TEST(BnInputWeightGrad, TheKernelEqualsRecomputingTheInputFirst) {
  Generator gen(9);
  const int64_t n = 2, h = 6, w = 5, c = 4;
  Tensor z = randn({n, h, w, c}, gen);
  Tensor mean = randn({c}, gen), invstd = rand({c}, gen, {}, 0.5, 1.5);
  Tensor gamma = randn({c}, gen), beta = randn({c}, gen);
  const kernels::Context ctx = kernels::Context::of(Device::cpu());
  for (auto [groups, affine] :
       {std::pair{c, true}, std::pair{int64_t{1}, true}, std::pair{c, false}}) {
    SCOPED_TRACE(testing::Message() << "groups " << groups << ", affine " << affine);
    const void* gp = affine ? gamma.data_ptr() : nullptr;
    const void* bp = affine ? beta.data_ptr() : nullptr;
    kernels::Conv2dShape s;
    s.n = n, s.h = h, s.w = w, s.c = c, s.k = c, s.kh = s.kw = 3;
    s.stride_h = s.stride_w = 1, s.pad_h = s.pad_w = 1, s.dil_h = s.dil_w = 1, s.groups = groups;
    Tensor dy = randn({n, s.oh(), s.ow(), c}, gen);
    Tensor x = Tensor::empty(z.shape(), z.options());
    kernels::batch_norm_act_apply(ctx, DType::f32, Activation::relu6, n * h * w, c, z.data_ptr(),
                                  gp, bp, mean.data_ptr(), invstd.data_ptr(), x.data_ptr());
    Tensor dw_ref = Tensor::empty({c, 3, 3, c / groups}, z.options());
    Tensor db_ref = Tensor::empty({c}, z.options());
    kernels::conv2d_backward_weight(ctx, DType::f32, DType::f32, s, x.data_ptr(), dy.data_ptr(),
                                    dw_ref.data_ptr(), db_ref.data_ptr());
    Tensor dw = Tensor::empty(dw_ref.shape(), z.options()), db = Tensor::empty({c}, z.options());
    const kernels::BnActInput in{Activation::relu6, mean.data_ptr(), invstd.data_ptr(), gp, bp};
    kernels::conv2d_backward_weight_bn_act(ctx, DType::f32, DType::f32, s, in, z.data_ptr(),
                                           dy.data_ptr(), dw.data_ptr(), db.data_ptr());
    EXPECT_EQ(dw.to_vector(), dw_ref.to_vector());
    EXPECT_EQ(db.to_vector(), db_ref.to_vector());
  }
}
