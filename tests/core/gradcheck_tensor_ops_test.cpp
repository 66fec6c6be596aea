// Gradient checks (f64 finite differences) for the tensor ops for custom layers: math, where,
// maximum/minimum, softmax/log_softmax, amax, and the copying layout ops.
#include "gradcheck.h"

using namespace frugal;
using frugal::testing::kGradTolerance;
using frugal::testing::max_gradient_error;
using frugal::testing::rand64;

#define EXPECT_GRAD_OK(inputs, expr) \
  EXPECT_LT(max_gradient_error([](auto& in) { return expr; }, inputs), kGradTolerance) << #expr

TEST(GradCheckTensorOps, UnaryMath) {
  Tensor a = rand64({3, 4}, 31), p = rand64({3, 4}, 32, true, 0.3, 2.0);
  EXPECT_GRAD_OK({a}, abs(in[0]));
  EXPECT_GRAD_OK({a}, exp(in[0]));
  EXPECT_GRAD_OK({p}, log(in[0]));
  EXPECT_GRAD_OK({p}, sqrt(in[0]));
  EXPECT_GRAD_OK({p}, rsqrt(in[0]));
  EXPECT_GRAD_OK({p}, pow(in[0], 2.5));
  EXPECT_GRAD_OK({a}, pow(in[0], 3.0));
  EXPECT_GRAD_OK({a}, sigmoid(mul(in[0], 3.0)));
  EXPECT_GRAD_OK({a}, tanh(mul(in[0], 2.0)));
  EXPECT_GRAD_OK({a}, clamp(in[0], -0.5, 0.4));
  EXPECT_GRAD_OK({a}, clamp(in[0], std::nullopt, 0.1));
  EXPECT_GRAD_OK({a}, neg(in[0]));
}

TEST(GradCheckTensorOps, BinaryMathWithBroadcasting) {
  Tensor a = rand64({2, 3, 4}, 33), b = rand64({3, 1}, 34), p = rand64({2, 3, 4}, 35, true, 0.5, 2);
  EXPECT_GRAD_OK((std::vector<Tensor>{a, b}), maximum(in[0], in[1]));
  EXPECT_GRAD_OK((std::vector<Tensor>{a, b}), minimum(in[0], in[1]));
  EXPECT_GRAD_OK((std::vector<Tensor>{p, b}), pow(in[0], in[1]));
}

TEST(GradCheckTensorOps, WhereAndComposedHardSwish) {
  Tensor a = rand64({3, 4}, 36), b = rand64({4}, 37);
  EXPECT_GRAD_OK((std::vector<Tensor>{a, b}), where(gt(in[0], 0.1), in[0], in[1]));
  // x * clamp(x + 3, 0, 6) / 6 away from the kinks at -3 and 3.
  Tensor x = rand64({2, 3, 5}, 38, true, -5, 5);
  EXPECT_GRAD_OK({x}, div(mul(in[0], clamp(add(in[0], 3.0), 0.0, 6.0)), 6.0));
}

TEST(GradCheckTensorOps, SoftmaxLogSoftmaxAmax) {
  Tensor a = rand64({2, 3, 4}, 39, true, -3, 3);
  for (int64_t d : {0, 1, 2}) {
    SCOPED_TRACE(d);
    EXPECT_LT(max_gradient_error([d](auto& in) { return softmax(in[0], d); }, {a}), kGradTolerance);
    EXPECT_LT(max_gradient_error([d](auto& in) { return log_softmax(in[0], d); }, {a}),
              kGradTolerance);
  }
  EXPECT_GRAD_OK({a}, amax(in[0]));
  EXPECT_GRAD_OK({a}, amax(in[0], {1}));
  EXPECT_GRAD_OK({a}, amax(in[0], {0, 2}, true));
  EXPECT_GRAD_OK({a}, amax(in[0], {-1}, true));
}

TEST(GradCheckTensorOps, CopyingLayoutOps) {
  Tensor a = rand64({2, 3, 4}, 40), b = rand64({2, 1, 4}, 41);
  EXPECT_GRAD_OK((std::vector<Tensor>{a, b}), cat({in[0], in[1]}, 1));
  EXPECT_GRAD_OK((std::vector<Tensor>{a, a}), stack({in[0], in[1]}, 3));
  EXPECT_GRAD_OK({a}, narrow(in[0], 2, 1, 2));
  EXPECT_GRAD_OK({a}, slice(in[0], 1, 0, 3, 2));
  EXPECT_GRAD_OK({a}, permute(in[0], {2, 0, 1}));
  EXPECT_GRAD_OK({a}, transpose(in[0], 0, 2));
}
