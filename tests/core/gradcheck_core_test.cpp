// Gradient checks (f64 finite differences) for every differentiable core op.
#include "gradcheck.h"

using namespace frugal;
using frugal::testing::kGradTolerance;
using frugal::testing::max_gradient_error;
using frugal::testing::rand64;

TEST(GradCheckCore, AddSubMulDivSameShape) {
  Tensor a = rand64({3, 4}, 1), b = rand64({3, 4}, 2, true, 0.5, 2.0);
  EXPECT_LT(max_gradient_error([](auto& in) { return add(in[0], in[1]); }, {a, b}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return sub(in[0], in[1]); }, {a, b}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return mul(in[0], in[1]); }, {a, b}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return div(in[0], in[1]); }, {a, b}), kGradTolerance);
}

TEST(GradCheckCore, BroadcastingPerSampleChannelScale) {
  // Squeeze-excitation's pattern: [N, 1, 1, C] * [N, H, W, C].
  Tensor s = rand64({2, 1, 1, 3}, 3), x = rand64({2, 4, 5, 3}, 4);
  EXPECT_LT(max_gradient_error([](auto& in) { return mul(in[0], in[1]); }, {s, x}), kGradTolerance);
  Tensor bias = rand64({3}, 5);
  EXPECT_LT(max_gradient_error([](auto& in) { return add(in[0], in[1]); }, {x, bias}),
            kGradTolerance);
  Tensor col = rand64({2, 4, 1, 1}, 6, true, 0.5, 1.5);
  EXPECT_LT(max_gradient_error([](auto& in) { return div(in[0], in[1]); }, {x, col}),
            kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return sub(in[0], in[1]); }, {col, x}),
            kGradTolerance);
}

TEST(GradCheckCore, ScalarOpsAndNeg) {
  Tensor a = rand64({5}, 7);
  EXPECT_LT(max_gradient_error([](auto& in) { return add(in[0], 2.5); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return sub(in[0], 1.5); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return mul(in[0], -3.0); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return div(in[0], 4.0); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return rsub(in[0], 1.0); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return neg(in[0]); }, {a}), kGradTolerance);
}

TEST(GradCheckCore, SumAndMeanOverDims) {
  Tensor a = rand64({2, 3, 4, 5}, 8);
  EXPECT_LT(max_gradient_error([](auto& in) { return sum(in[0]); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return sum(in[0], {1, 2}); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return mean(in[0], {-1}, true); }, {a}),
            kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return mean(in[0], {0, 3}); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error(
                [](auto& in) {
                  return sum_to(in[0], Shape{3, 1, 5});
                },
                {a}),
            kGradTolerance);
}

TEST(GradCheckCore, Matmul) {
  Tensor a = rand64({3, 4}, 9), b = rand64({4, 5}, 10), bt = rand64({5, 4}, 11);
  EXPECT_LT(max_gradient_error([](auto& in) { return matmul(in[0], in[1]); }, {a, b}),
            kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return matmul(in[0], in[1], true); }, {a, bt}),
            kGradTolerance);
}

TEST(GradCheckCore, ReshapeFlattenCloneAndUseTwice) {
  Tensor a = rand64({2, 3, 4}, 12);
  EXPECT_LT(max_gradient_error(
                [](auto& in) {
                  return in[0].reshape(Shape{4, -1});
                },
                {a}),
            kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return in[0].flatten(1); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& in) { return in[0].clone(); }, {a}), kGradTolerance);
  // A tensor used twice accumulates both gradients: d(a*a)/da = 2a.
  EXPECT_LT(max_gradient_error([](auto& in) { return mul(in[0], in[0]); }, {a}), kGradTolerance);
  EXPECT_LT(max_gradient_error(
                [](auto& in) { return add(mul(in[0], 3.0), in[0].to(Device::cpu())); }, {a}),
            kGradTolerance);
}

TEST(GradCheckCore, CastRoundTripPassesGradientInInputDtype) {
  Tensor a = rand64({6}, 13);
  Tensor y = sum(mul(a.to(DType::f32), 2.0));
  y.backward();
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().dtype(), DType::f64);
  for (double g : a.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 2.0);
}
