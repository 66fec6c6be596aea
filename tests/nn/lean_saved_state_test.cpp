// The lean saved state (Note [Saved tensors], Note [Batch norm with its activation]): gradient
// checks of batch norm fused with each activation, recipes reproducing the forward bit for bit,
// one stored tensor per layer, in-place writes caught, and Sequential's fusion.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "gradcheck.h"
#include "memory/allocator.h"
#include "nn/functional.h"
#include "nn/layers.h"

using namespace frugal;
namespace F = frugal::nn::functional;
using F::Activation;
using frugal::testing::kGradTolerance;
using frugal::testing::max_gradient_error;
using frugal::testing::rand64;

namespace {

constexpr Activation kAll[] = {Activation::relu, Activation::relu6,   Activation::hardswish,
                               Activation::silu, Activation::sigmoid, Activation::identity};

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector() == b.to_vector();
}

}  // namespace

TEST(LeanSavedState, BatchNormWithEachActivationPassesGradientChecks) {
  // Scaled so the normalised values spread over the kinks of every activation (0, 6, +-3).
  Tensor x = rand64({3, 2, 2, 4}, 4, true, -2, 2);
  Tensor gamma = rand64({4}, 5, true, 1.5, 3.5), beta = rand64({4}, 6, true, -1, 4);
  Tensor rm = rand64({4}, 7, false), rv = rand64({4}, 8, false, 0.5, 2.0);
  for (Activation act : kAll) {
    SCOPED_TRACE(static_cast<int>(act));
    // Training: the output goes through mul, which saves it, so backward also recomputes it.
    EXPECT_LT(max_gradient_error(
                  [act](auto& v) {
                    return F::batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), {.activation = act});
                  },
                  {x, gamma, beta}),
              1e-5);
    EXPECT_LT(max_gradient_error(
                  [&](auto& v) {
                    return F::batch_norm(v[0], v[1], v[2], rm, rv,
                                         {.training = false, .activation = act});
                  },
                  {x, gamma, beta}),
              kGradTolerance);
  }
}

TEST(LeanSavedState, AChainOfRecipesPassesGradientChecks) {
  // conv -> bn+relu6 -> conv -> bn -> residual add with another bn output -> conv: every saved
  // activation between the convs is a recipe.
  Tensor x = rand64({2, 5, 5, 3}, 11, true);
  Tensor w1 = rand64({4, 3, 3, 3}, 12), w2 = rand64({4, 1, 1, 4}, 13),
         w3 = rand64({2, 3, 3, 4}, 14);
  Tensor g = rand64({4}, 15, true, 0.5, 1.5), b = rand64({4}, 16);
  auto f = [](auto& v) {
    Tensor z1 = F::conv2d(v[0], v[1], Tensor(), {.padding = 1});
    Tensor a1 =
        F::batch_norm(z1, v[4], v[5], Tensor(), Tensor(), {.activation = Activation::relu6});
    Tensor z2 = F::conv2d(a1, v[2], Tensor());
    Tensor y = add(F::batch_norm(z2, v[4], v[5], Tensor(), Tensor()), a1);
    if (autograd::grad_enabled()) {
      EXPECT_TRUE(autograd::has_recipe(a1) && autograd::has_recipe(y));
    }
    return F::conv2d(y, v[3], Tensor(), {.padding = 1});
  };
  EXPECT_LT(max_gradient_error(f, {x, w1, w2, w3, g, b}), 1e-5);
}

TEST(LeanSavedState, RecomputedOutputEqualsTheForwardBitForBit) {
  Generator gen(3);
  for (Activation act : kAll) {
    SCOPED_TRACE(static_cast<int>(act));
    Tensor x = randn({4, 5, 5, 8}, gen, {.requires_grad = true});
    Tensor gamma = rand(Shape{8}, gen, {.requires_grad = true}, 0.5, 2.0);
    Tensor beta = randn({8}, gen, {.requires_grad = true});
    Tensor y = F::batch_norm(x * 3.0, gamma, beta, Tensor(), Tensor(), {.activation = act});
    autograd::SavedTensor saved(y);
    ASSERT_TRUE(saved.is_recipe());
    EXPECT_EQ(saved.nbytes(), y.nbytes());
    EXPECT_TRUE(bit_equal(saved.unpack("test"), y));
  }
}

TEST(LeanSavedState, OneStoredTensorPerLayer) {
  Generator gen(5);
  Tensor x = randn({2, 8, 8, 3}, gen);
  nn::Sequential net;
  net.push_back(
      std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  net.push_back(std::make_shared<nn::BatchNorm2d>(8));
  net.push_back(std::make_shared<nn::ReLU6>());
  net.push_back(
      std::make_shared<nn::Conv2d>(8, 8, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  net.push_back(std::make_shared<nn::BatchNorm2d>(8));
  net.push_back(std::make_shared<nn::ReLU6>());
  Tensor out = net.forward(x);
  // Stored: the input and both conv outputs ([2, 8, 8, 8] each), the parameters backward reads
  // (all but the first conv's weight: x needs no gradient) and the per-channel statistics ([8]
  // mean and invstd per batch norm). The activations are recipes.
  size_t params = 0;
  for (const Tensor& p : net.parameters()) params += p.nbytes();
  params -= static_cast<nn::Conv2d&>(*net[0]).weight.nbytes();
  const size_t act = 2 * 8 * 8 * 8 * 4;
  const size_t stats = 2 * 2 * 8 * 4;
  EXPECT_EQ(autograd::saved_bytes({mul(out, out)}), x.nbytes() + 2 * act + params + stats);
}

TEST(LeanSavedState, SequentialFusionMatchesTheUnfusedOps) {
  Generator gen(7);
  Tensor x = randn({3, 6, 6, 4}, gen);
  auto conv = std::make_shared<nn::Conv2d>(4, 8, 3, nn::Conv2dOptions{.padding = 1});
  auto bn = std::make_shared<nn::BatchNorm2d>(8);
  nn::Sequential fused({conv, bn, std::make_shared<nn::SiLU>()});
  Tensor y = fused.forward(x);
  Tensor fused_running = bn->running_mean.clone();
  y.backward(ones(y.shape()));
  Tensor gw = conv->weight.grad().clone(), gg = bn->weight.grad().clone();
  conv->weight.zero_grad(), bn->weight.zero_grad();
  Tensor y2 = F::silu(F::batch_norm(conv->forward(x), bn->weight, bn->bias, Tensor(), Tensor()));
  y2.backward(ones(y2.shape()));
  std::vector<double> a = y.to_vector(), b = y2.to_vector();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6) << i;
  std::vector<double> ga = gw.to_vector(), gb = conv->weight.grad().to_vector();
  for (size_t i = 0; i < ga.size(); ++i) ASSERT_NEAR(ga[i], gb[i], 1e-4 * (1 + std::abs(gb[i])));
  std::vector<double> gga = gg.to_vector(), ggb = bn->weight.grad().to_vector();
  for (size_t i = 0; i < gga.size(); ++i)
    ASSERT_NEAR(gga[i], ggb[i], 1e-4 * (1 + std::abs(ggb[i])));
  EXPECT_NE(fused_running.to_vector(), zeros({8}).to_vector()) << "running stats updated";
}

TEST(LeanSavedState, AnInPlaceWriteAfterSavingIsCaught) {
  Tensor a = full({4}, 2.0, {.requires_grad = true});
  Tensor b = full({4}, 3.0);
  Tensor y = sum(mul(a, b));  // mul saves b for a's gradient
  fill_(b, 5.0);
  try {
    y.backward();
    FAIL() << "backward used a tensor written in place after it was saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mul"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
  }
}

TEST(LeanSavedState, RecipesDoNotOutliveBackward) {
  Generator gen(9);
  Tensor x = randn({4, 4, 4, 8}, gen);
  Tensor w = randn({8, 1, 1, 8}, gen, {.requires_grad = true});
  Tensor gamma = ones({8}, {.requires_grad = true}), beta = zeros({8}, {.requires_grad = true});
  Tensor y = F::batch_norm(F::conv2d(x, w, Tensor()), gamma, beta, Tensor(), Tensor(),
                           {.activation = Activation::relu});
  ASSERT_TRUE(autograd::has_recipe(y));
  Tensor loss = sum(mul(y, y));
  loss.backward();
  // The producing node released its recipe: y no longer keeps the conv output alive.
  EXPECT_FALSE(autograd::has_recipe(y));
  // Without grad mode nothing gets a recipe at all.
  autograd::NoGradGuard no_grad;
  Tensor y2 = F::batch_norm(x, gamma, beta, Tensor(), Tensor(), {.activation = Activation::relu});
  EXPECT_FALSE(autograd::has_recipe(y2));
}

TEST(LeanSavedState, BatchNormBackwardWritesOverAGradientItOwns) {
  // sum's backward hands batch norm a fresh gradient nobody else holds: dx goes into it, so the
  // backward never holds two activation-sized buffers (x is the leaf, counted before).
  Generator gen(13);
  Tensor x = randn({8, 16, 16, 32}, gen, {.requires_grad = true});
  Tensor gamma = ones({32}, {.requires_grad = true}), beta = zeros({32}, {.requires_grad = true});
  Tensor loss =
      sum(F::batch_norm(x, gamma, beta, Tensor(), Tensor(), {.activation = Activation::relu6}));
  memory::Allocator& cpu = memory::cpu_allocator();
  const int64_t before = cpu.stats().allocated_bytes.current;
  cpu.reset_peak_stats();
  loss.backward();
  const int64_t extra = cpu.stats().allocated_bytes.peak - before;
  EXPECT_GE(extra, static_cast<int64_t>(x.nbytes()));
  EXPECT_LT(extra, static_cast<int64_t>(x.nbytes()) * 3 / 2) << "dx was not written in place";
  // And a gradient the caller still holds is left alone.
  Tensor y = F::batch_norm(x, gamma, beta, Tensor(), Tensor());
  Tensor g = full(y.shape(), 1.0);
  y.backward(g);
  for (double v : g.to_vector()) ASSERT_EQ(v, 1.0);
}

TEST(LeanSavedState, NestedSequentialsHoldNoMoreThanAFlatOne) {
  // Note [Flat sequential runs]: the inner runs hold one activation at a time, as a flat list
  // of the same layers does; nested calls used to keep each inner input alive until they returned.
  auto conv_a = std::make_shared<nn::Conv2d>(4, 32, 1, nn::Conv2dOptions{.bias = false});
  auto bn_a = std::make_shared<nn::BatchNorm2d>(32);
  auto conv_b = std::make_shared<nn::Conv2d>(
      32, 32, 3, nn::Conv2dOptions{.stride = 2, .padding = 1, .groups = 32});
  auto bn_b = std::make_shared<nn::BatchNorm2d>(32);
  auto inner_a = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{conv_a, bn_a, std::make_shared<nn::ReLU6>()});
  auto inner_b = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{conv_b, bn_b, std::make_shared<nn::ReLU6>()});
  nn::Sequential nested({inner_a, inner_b});
  nn::Sequential flat(
      {conv_a, bn_a, std::make_shared<nn::ReLU6>(), conv_b, bn_b, std::make_shared<nn::ReLU6>()});
  Generator gen(17);
  Tensor x = randn({4, 16, 16, 4}, gen);
  memory::Allocator& cpu = memory::cpu_allocator();
  auto forward_peak = [&](nn::Sequential& net, std::vector<double>* out) {
    const int64_t before = cpu.stats().allocated_bytes.current;
    cpu.reset_peak_stats();
    Tensor y = net.forward(x);
    *out = y.to_vector();
    return cpu.stats().allocated_bytes.peak - before;
  };
  std::vector<double> y_nested, y_flat;
  const int64_t nested_peak = forward_peak(nested, &y_nested);
  const int64_t flat_peak = forward_peak(flat, &y_flat);
  EXPECT_EQ(y_nested, y_flat);
  EXPECT_EQ(nested_peak, flat_peak);
  // Without flattening the expand output (4*16*16*32 f32) would still be alive at the depthwise
  // batch norm: the peak stays below conv_a's output, conv_b's output, its batch norm output and
  // the saved expand output together.
  const int64_t wide = 4 * 16 * 16 * 32 * 4, narrow = wide / 4;
  EXPECT_LT(nested_peak, 2 * wide + 2 * narrow);
}

TEST(LeanSavedState, DropoutKeepsItsDrawNotAMask) {
  Generator gen(21), drop(5);
  Tensor x = randn({64, 32}, gen, {.requires_grad = true});
  Tensor y = F::dropout(x, 0.3, true, drop);
  EXPECT_EQ(autograd::saved_bytes({y}), 0u);
  y.backward(ones(y.shape()));
  // The gradient is the mask drawn again: 1 / (1 - p) where y kept x, 0 where it dropped it.
  std::vector<double> g = x.grad().to_vector(), yv = y.to_vector(), xv = x.to_vector();
  for (size_t i = 0; i < g.size(); ++i) {
    const double kept = static_cast<float>(1.0 / 0.7);  // the scale in the tensor dtype
    ASSERT_EQ(g[i], yv[i] == 0.0 && xv[i] != 0.0 ? 0.0 : kept) << i;
  }
}
