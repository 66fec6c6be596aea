// Recomputed convolutions (Note [Recomputed convolutions] in nn/functional.h): a conv whose input
// is a recipe can make its output one too; gradients stay exact (f64 checks, and a whole model bit
// for bit), and the depthwise outputs of MobileNetV2 are no longer kept.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "gradcheck.h"
#include "models/registry.h"
#include "nn/functional.h"
#include "train/saved_estimate.h"

using namespace frugal;
namespace F = frugal::nn::functional;
using F::Activation;
using frugal::testing::max_gradient_error;
using frugal::testing::rand64;

TEST(RecomputedConv, ADepthwiseConvOfARecipePassesGradientChecks) {
  // expand conv -> bn+relu6 -> depthwise conv (recomputed) -> bn -> project conv.
  Tensor x = rand64({2, 5, 5, 3}, 21, true);
  Tensor we = rand64({6, 1, 1, 3}, 22), wd = rand64({6, 3, 3, 1}, 23),
         wp = rand64({2, 1, 1, 6}, 24);
  Tensor g = rand64({6}, 25, true, 0.5, 1.5), b = rand64({6}, 26);
  auto f = [](auto& v) {
    Tensor e = F::batch_norm(F::conv2d(v[0], v[1], Tensor()), v[4], v[5], Tensor(), Tensor(),
                             {.activation = Activation::relu6});
    Tensor d = F::conv2d(e, v[2], Tensor(), {.padding = 1, .groups = 6, .recompute_output = true});
    if (autograd::grad_enabled()) {
      EXPECT_TRUE(autograd::has_recipe(d));
    }
    Tensor n = F::batch_norm(d, v[4], v[5], Tensor(), Tensor());
    return F::conv2d(n, v[3], Tensor());
  };
  EXPECT_LT(max_gradient_error(f, {x, we, wd, wp, g, b}), 1e-5);
}

TEST(RecomputedConv, AnInputWithoutARecipeKeepsTheOutput) {
  Tensor x = rand64({1, 4, 4, 2}, 27, true), w = rand64({2, 3, 3, 1}, 28);
  Tensor y = F::conv2d(x, w, Tensor(), {.padding = 1, .groups = 2, .recompute_output = true});
  EXPECT_FALSE(autograd::has_recipe(y));  // x is stored anyway: nothing to gain
}

namespace {

struct Grads {
  double loss = 0;
  std::vector<std::vector<double>> grads;
};

Grads mobilenet_grads(bool recompute) {
  manual_seed(3);
  auto model =
      models::create("mobilenet_v2", {.num_classes = 10, .recompute_depthwise = recompute});
  model->train();
  Generator gen(4);
  Tensor x = randn({2, 32, 32, 3}, gen);
  Tensor out = (*model)(x);
  Tensor loss = sum(mul(out, out));
  loss.backward();
  Grads g{loss.item(), {}};
  for (const Tensor& p : model->parameters()) g.grads.push_back(p.grad().to_vector());
  return g;
}

}  // namespace

TEST(RecomputedConv, MobileNetV2GradientsAreUnchangedBitForBit) {
  default_generator().set_offset(0);
  Grads kept = mobilenet_grads(false);
  default_generator().set_offset(0);
  Grads recomputed = mobilenet_grads(true);
  EXPECT_EQ(kept.loss, recomputed.loss);
  ASSERT_EQ(kept.grads.size(), recomputed.grads.size());
  for (size_t i = 0; i < kept.grads.size(); ++i) EXPECT_EQ(kept.grads[i], recomputed.grads[i]) << i;
}

TEST(RecomputedConv, MobileNetV2KeepsLessThanOneTensorPerLayer) {
  auto estimate = [](bool recompute) {
    auto model = models::create("mobilenet_v2", {.recompute_depthwise = recompute});
    model->to(Device::meta());
    return train::estimate_saved(*model, Shape{128, 224, 224, 3}, DType::f16);
  };
  train::SavedEstimate kept = estimate(false), recomputed = estimate(true);
  EXPECT_EQ(kept.conv_output_bytes, recomputed.conv_output_bytes);
  // What is no longer kept is exactly the 17 depthwise outputs: summed over MobileNetV2's table
  // (112x112x32, 56x56x96, 56x56x144, 28x28x144, ...) 2,301,824 elements per image, f16.
  EXPECT_EQ(kept.saved_bytes - recomputed.saved_bytes, size_t{2301824} * 128 * 2);
  EXPECT_LT(recomputed.saved_bytes, recomputed.conv_output_bytes * 70 / 100);
}
