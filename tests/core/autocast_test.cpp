// Autocast on the CPU (so CI covers it): each op's output dtype follows the policy table, guards
// nest and restore, parameters are cast once per forward (Note [Autocast cache]), gradients of
// f32 parameters arrive in f32, and a small CNN trains under bf16 autocast.
#include "core/autocast.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/optimizer.h"

using namespace frugal;
namespace F = frugal::nn::functional;

namespace {

constexpr DType kLow[] = {DType::f16, DType::bf16};

Tensor param(const Shape& s, Generator& gen) {
  Tensor p = randn(s, gen);
  p.requires_grad_();
  return p;
}

}  // namespace

TEST(AutocastPolicy, TableFollowsTheReference) {
  EXPECT_EQ(autocast_policy(AutocastOp::conv2d), AutocastPolicy::lower);
  EXPECT_EQ(autocast_policy(AutocastOp::linear), AutocastPolicy::lower);
  EXPECT_EQ(autocast_policy(AutocastOp::matmul), AutocastPolicy::lower);
  EXPECT_EQ(autocast_policy(AutocastOp::cross_entropy), AutocastPolicy::f32);
  EXPECT_EQ(autocast_policy(AutocastOp::batch_norm), AutocastPolicy::f32);
  EXPECT_EQ(autocast_policy(AutocastOp::add), AutocastPolicy::promote);
  EXPECT_EQ(autocast_policy(AutocastOp::relu6), AutocastPolicy::pass);
  EXPECT_EQ(autocast_policy(AutocastOp::max_pool2d), AutocastPolicy::pass);
  EXPECT_STREQ(autocast_op_name(AutocastOp::global_avg_pool), "global_avg_pool");
}

TEST(Autocast, OutputDtypesFollowThePolicy) {
  for (DType low : kLow) {
    SCOPED_TRACE(dtype_name(low));
    Generator gen(3);
    Tensor x = randn({2, 5, 5, 3}, gen);
    Tensor w = param({4, 3, 3, 3}, gen), b = param({4}, gen);
    Tensor lw = param({6, 7}, gen), lb = param({6}, gen);
    Tensor a = randn({5, 7}, gen), m = randn({7, 3}, gen);
    Tensor labels = from_vector({1, 0, 5, 2, 3}, Shape{5}, {.dtype = DType::i64});
    Tensor gamma = ones({4}, {.requires_grad = true}), beta = zeros({4}, {.requires_grad = true});
    Tensor rm = zeros({4}), rv = ones({4});
    AutocastGuard amp(Device::cpu(), low);

    Tensor y = F::conv2d(x, w, b, {.padding = 1});
    EXPECT_EQ(y.dtype(), low);
    EXPECT_EQ(F::linear(a, lw, lb).dtype(), low);
    EXPECT_EQ(matmul(a, m).dtype(), low);
    Tensor logits = F::linear(a, lw, lb);
    EXPECT_EQ(F::cross_entropy(logits, labels).dtype(), DType::f32);
    EXPECT_EQ(sum(y).dtype(), DType::f32);
    EXPECT_EQ(mean(y, {1, 2}).dtype(), low);  // PyTorch's CUDA f32 list has sum, not mean

    // batch_norm: output in the input's dtype, f32 running statistics updated in place.
    Tensor z = F::batch_norm(y, gamma, beta, rm, rv, {.training = true});
    EXPECT_EQ(z.dtype(), low);
    EXPECT_EQ(rm.dtype(), DType::f32);
    EXPECT_EQ(rv.dtype(), DType::f32);
    std::vector<double> yv = y.to_vector();  // channel 0's batch mean, the reference
    double mean0 = 0;
    for (size_t i = 0; i < yv.size(); i += 4) mean0 += yv[i];
    mean0 /= static_cast<double>(yv.size() / 4);
    EXPECT_NEAR(rm.to_vector()[0], 0.1 * mean0, 1e-5 + 1e-3 * std::fabs(mean0));

    // promote: f16/bf16 with f32 gives f32; pass-through keeps the low dtype.
    EXPECT_EQ(add(y, randn({4}, gen)).dtype(), DType::f32);
    EXPECT_EQ(mul(y, y).dtype(), low);
    EXPECT_EQ(F::relu(y).dtype(), low);
    EXPECT_EQ(F::relu6(y).dtype(), low);
    EXPECT_EQ(F::max_pool2d(y, {.kernel = 2}).dtype(), low);
    EXPECT_EQ(F::avg_pool2d(y, {.kernel = 2}).dtype(), low);
    EXPECT_EQ(F::global_avg_pool(y).dtype(), low);
    EXPECT_EQ(F::dropout(y, 0.3, true, gen).dtype(), low);
    EXPECT_EQ(y.reshape(Shape{-1}).dtype(), low);
  }
}

// The other 16-bit dtype is lowered too (PyTorch's cached_cast takes every floating dtype but
// f64): a bf16 input under f16 autocast meets its f16 weight, where it was left bf16 and the
// convolution refused the mix.
TEST(Autocast, TheOther16BitDtypeIsLoweredToo) {
  for (DType low : kLow) {
    SCOPED_TRACE(dtype_name(low));
    const DType other = low == DType::f16 ? DType::bf16 : DType::f16;
    Generator gen(4);
    Tensor x = cast(randn({2, 5, 5, 3}, gen), other);
    Tensor w = param({4, 3, 3, 3}, gen), b = param({4}, gen);
    Tensor a = cast(randn({5, 7}, gen), other), lw = param({6, 7}, gen), lb = param({6}, gen);
    AutocastGuard amp(Device::cpu(), low);
    EXPECT_EQ(F::conv2d(x, w, b, {.padding = 1}).dtype(), low);
    EXPECT_EQ(F::linear(a, lw, lb).dtype(), low);
    // f64 stays f64 (gradient checks run under autocast guards too).
    EXPECT_EQ(matmul(cast(a, DType::f64), cast(randn({7, 2}, gen), DType::f64)).dtype(),
              DType::f64);
  }
}

TEST(Autocast, LoweredConvMatchesAnF32ReferenceWithinTheDtypesPrecision) {
  Generator gen(9);
  Tensor x = randn({2, 6, 5, 3}, gen), w = randn({5, 3, 3, 3}, gen);
  Tensor ref = F::conv2d(x, w, Tensor(), {.padding = 1});
  for (DType low : kLow) {
    AutocastGuard amp(Device::cpu(), low);
    Tensor y = F::conv2d(x, w, Tensor(), {.padding = 1});
    ASSERT_EQ(y.dtype(), low);
    // Inputs and output each rounded once; 27 products accumulate in f32.
    double tol = low == DType::f16 ? 2e-2 : 1.5e-1;
    EXPECT_TRUE(allclose(y.to(DType::f32), ref, 0.0, tol)) << dtype_name(low);
  }
}

TEST(Autocast, IsOffOutsideGuardsAndForOtherDeviceTypes) {
  Generator gen(1);
  Tensor a = randn({3, 4}, gen), b = randn({4, 2}, gen);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
  AutocastGuard amp(Device::cuda(), DType::f16);  // state for CUDA tensors only
  EXPECT_TRUE(autocast::is_enabled(DeviceType::cuda));
  EXPECT_FALSE(autocast::is_enabled(DeviceType::cpu));
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
}

TEST(Autocast, GuardsNestAndRestore) {
  Generator gen(2);
  Tensor a = randn({3, 4}, gen), b = randn({4, 2}, gen);
  {
    AutocastGuard outer(Device::cpu(), DType::bf16);
    EXPECT_EQ(matmul(a, b).dtype(), DType::bf16);
    {
      AutocastGuard inner(Device::cpu(), DType::f16);
      EXPECT_EQ(matmul(a, b).dtype(), DType::f16);
      {
        AutocastGuard off(Device::cpu(), DType::f16, /*enabled=*/false);
        EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
      }
      EXPECT_EQ(matmul(a, b).dtype(), DType::f16);
    }
    EXPECT_EQ(autocast::dtype(DeviceType::cpu), DType::bf16);
    EXPECT_EQ(matmul(a, b).dtype(), DType::bf16);
  }
  EXPECT_FALSE(autocast::is_enabled(DeviceType::cpu));
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
  EXPECT_THROW(AutocastGuard(Device::cpu(), DType::f32), Error);
  // Disabled, any dtype is accepted, as torch.autocast(enabled=False) does, and the state's
  // dtype is left as it was.
  {
    AutocastGuard outer(Device::cpu(), DType::bf16);
    AutocastGuard off(Device::cpu(), DType::f32, /*enabled=*/false);
    EXPECT_FALSE(autocast::is_enabled(DeviceType::cpu));
    EXPECT_EQ(autocast::dtype(DeviceType::cpu), DType::bf16);
    EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
  }
  EXPECT_FALSE(autocast::is_enabled(DeviceType::cpu));
}

TEST(Autocast, ParametersAreCastOncePerForwardAndTheCacheEndsWithTheOutermostGuard) {
  Generator gen(4);
  Tensor w = param({6, 5}, gen), x = randn({3, 5}, gen);
  Tensor not_param = randn({6, 5}, gen);  // no grad: never cached
  {
    AutocastGuard outer(Device::cpu(), DType::f16);
    Tensor c1 = autocast::apply(AutocastOp::linear, w);
    Tensor c2 = autocast::apply(AutocastOp::matmul, w);
    EXPECT_TRUE(c1.same(c2)) << "one low-precision copy per parameter per forward";
    EXPECT_EQ(c1.dtype(), DType::f16);
    EXPECT_EQ(autocast::cache_size(), 1u);
    Tensor n1 = autocast::apply(AutocastOp::linear, not_param);
    EXPECT_FALSE(n1.same(autocast::apply(AutocastOp::linear, not_param)));
    EXPECT_EQ(autocast::cache_size(), 1u);
    {
      AutocastGuard inner(Device::cpu(), DType::f16);
      EXPECT_TRUE(autocast::apply(AutocastOp::conv2d, w).same(c1));
    }
    EXPECT_EQ(autocast::cache_size(), 1u) << "an inner guard must not clear the cache";
    // An in-place update (optimizer step) bumps the version: the stale copy is replaced.
    w.bump_version();
    Tensor c3 = autocast::apply(AutocastOp::linear, w);
    EXPECT_FALSE(c3.same(c1));
    EXPECT_EQ(autocast::cache_size(), 1u);
    {
      autograd::NoGradGuard ng;
      Tensor d1 = autocast::apply(AutocastOp::linear, w);
      EXPECT_FALSE(d1.same(c3)) << "no cache lookups or inserts under no-grad";
      EXPECT_FALSE(d1.same(autocast::apply(AutocastOp::linear, w)));
    }
  }
  EXPECT_EQ(autocast::cache_size(), 0u);
  {
    autograd::NoGradGuard ng;
    AutocastGuard amp(Device::cpu(), DType::f16);
    Tensor y = F::linear(x, w, Tensor());
    EXPECT_EQ(y.dtype(), DType::f16);
    EXPECT_EQ(autocast::cache_size(), 0u);
  }
}

TEST(Autocast, ParameterGradientsArriveInF32AndMatchTheF32Gradients) {
  for (DType low : kLow) {
    SCOPED_TRACE(dtype_name(low));
    Generator gen(6);
    Tensor x = randn({2, 5, 4, 3}, gen);
    Tensor w = param({4, 3, 3, 3}, gen), lw = param({3, 4}, gen), lb = param({3}, gen);
    Tensor labels = from_vector({2, 0}, Shape{2}, {.dtype = DType::i64});
    auto forward = [&] {
      // The conv weight is used twice: both uses share one cached copy and one cast node.
      Tensor h = F::relu(F::conv2d(x, w, Tensor(), {.padding = 1}));
      Tensor h2 = F::conv2d(x, w, Tensor(), {.padding = 1});
      Tensor p = F::global_avg_pool(add(h, h2)).flatten(1);
      return F::cross_entropy(F::linear(p, lw, lb), labels);
    };
    Tensor ref_loss = forward();
    ref_loss.backward();
    std::vector<Tensor> ref = {w.grad(), lw.grad(), lb.grad()};
    w.zero_grad(), lw.zero_grad(), lb.zero_grad();
    Tensor loss;
    {
      AutocastGuard amp(Device::cpu(), low);
      loss = forward();
    }
    EXPECT_EQ(loss.dtype(), DType::f32);
    loss.backward();
    std::vector<Tensor> got = {w.grad(), lw.grad(), lb.grad()};
    double tol = low == DType::f16 ? 3e-2 : 2e-1;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].defined());
      EXPECT_EQ(got[i].dtype(), DType::f32) << "gradient " << i;
      std::vector<double> g = got[i].to_vector(), r = ref[i].to_vector();
      double num = 0, den = 0;
      for (size_t k = 0; k < g.size(); ++k)
        num += (g[k] - r[k]) * (g[k] - r[k]), den += r[k] * r[k];
      EXPECT_LT(std::sqrt(num / den), tol) << "gradient " << i;
    }
  }
}

// Note [Lowering a forward's parameters together].
TEST(Autocast, ARegionStartingLikeTheLastLowersItsParametersTogether) {
  Generator gen(9);
  Tensor a = param({4, 5}, gen), b = param({3, 4}, gen), c = param({2, 3}, gen);
  Tensor x = randn({6, 5}, gen);
  auto forward = [&] {
    Tensor h = F::linear(F::linear(x, a, Tensor()), b, Tensor());
    return sum(F::linear(h, c, Tensor()));
  };
  auto grads_of_a_region = [&](const Tensor& first_cast, size_t cached_after_first) {
    a.zero_grad(), b.zero_grad(), c.zero_grad();
    AutocastGuard amp(Device::cpu(), DType::f16);
    autocast::apply(AutocastOp::linear, first_cast);
    EXPECT_EQ(autocast::cache_size(), cached_after_first);
    forward().backward();
    EXPECT_EQ(autocast::cache_size(), 3u);
    return std::vector<Tensor>{a.grad(), b.grad(), c.grad()};
  };
  grads_of_a_region(a, 1);  // the first region: nothing to go by
  // An in-place update, as an optimizer step makes: the next region must lower the new values.
  float* pb = b.data<float>();
  for (int64_t i = 0; i < b.numel(); ++i) pb[i] *= 0.5f;
  b.bump_version();
  std::vector<Tensor> together = grads_of_a_region(a, 3);  // starts like the last: a, b, c at once
  std::vector<Tensor> one_by_one = grads_of_a_region(b, 1);  // starts elsewhere: one at a time
  for (size_t i = 0; i < together.size(); ++i) {
    EXPECT_EQ(together[i].dtype(), DType::f32);
    EXPECT_EQ(together[i].to_vector(), one_by_one[i].to_vector()) << "gradient " << i;
  }
  c = Tensor();  // a freed parameter is skipped
  AutocastGuard amp(Device::cpu(), DType::f16);
  autocast::apply(AutocastOp::linear, b);  // the last region started with b
  EXPECT_EQ(autocast::cache_size(), 2u);
}

TEST(Autocast, ConvWritesTheWeightGradientInTheParametersDtype) {
  Generator gen(7);
  Tensor x = randn({2, 5, 5, 3}, gen), w = param({4, 3, 3, 3}, gen), b = param({4}, gen);
  AutocastGuard amp(Device::cpu(), DType::bf16);
  Tensor low_w = autocast::apply(AutocastOp::conv2d, w);
  EXPECT_EQ(low_w.dtype(), DType::bf16);
  EXPECT_EQ(autocast::grad_dtype(low_w), DType::f32) << "a cached copy's gradient is its source's";
  EXPECT_EQ(autocast::grad_dtype(w), DType::f32);
  Tensor low_x = autocast::apply(AutocastOp::conv2d, x);
  EXPECT_EQ(autocast::grad_dtype(low_x), DType::bf16) << "not a cached parameter copy";
  // The conv node hands the cached copies f32 gradients (no cast in between) and the input a
  // gradient in its own dtype.
  Tensor xb = x.to(DType::bf16);  // a bf16 leaf: autocast leaves it as it is
  xb.requires_grad_();
  Tensor y = F::conv2d(xb, w, b, {.padding = 1});
  ASSERT_NE(y.impl().grad_fn, nullptr);
  std::vector<Tensor> g = y.impl().grad_fn->apply({ones(y.shape(), {.dtype = y.dtype()})});
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].dtype(), DType::bf16);
  EXPECT_EQ(g[1].dtype(), DType::f32);
  EXPECT_EQ(g[2].dtype(), DType::f32);
}

TEST(Autocast, CachedCopySurvivesBackwardForGradientAccumulation) {
  Generator gen(8);
  Tensor w = param({4, 5}, gen), x = randn({3, 5}, gen);
  AutocastGuard amp(Device::cpu(), DType::f16);
  Tensor l1 = sum(F::linear(x, w, Tensor()));
  l1.backward();
  Tensor g1 = w.grad().clone();
  Tensor l2 = sum(F::linear(x, w, Tensor()));  // same cached copy, its node already ran once
  l2.backward();
  std::vector<double> a = g1.to_vector(), b = w.grad().to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], 2 * a[i], 1e-6 + 1e-6 * std::fabs(a[i]));
}

TEST(Autocast, SmallCnnTrainsUnderCpuBf16) {
  manual_seed(12);
  Generator gen(7);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(
      std::make_shared<nn::Conv2d>(1, 8, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(8));
  net->push_back(std::make_shared<nn::ReLU6>());
  net->push_back(std::make_shared<nn::Conv2d>(
      8, 8, 3, nn::Conv2dOptions{.stride = 2, .padding = 1, .groups = 8, .bias = false}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(8));
  net->push_back(std::make_shared<nn::ReLU6>());
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(8, 4));
  Tensor x = randn({16, 8, 8, 1}, gen);
  std::vector<double> lab;
  for (int i = 0; i < 16; ++i) lab.push_back(i % 4);
  Tensor y = from_vector(lab, Shape{16}, {.dtype = DType::i64});
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard amp(Device::cpu(), DType::bf16);
      loss = F::cross_entropy(net->forward(x), y);
    }
    loss.backward();
    for (const Tensor& p : net->parameters()) ASSERT_EQ(p.grad().dtype(), DType::f32);
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  EXPECT_LT(last, 0.3 * first) << "first " << first << " last " << last;
}
