// Activations against double-precision formulas: forward values, backward at PyTorch's kink
// conventions, and backward against central finite differences in f64 where f is smooth.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/kernel_test_util.h"

using namespace frugal;
using namespace frugal::test;
using kernels::Activation;

namespace {

const Activation kAll[] = {Activation::relu, Activation::relu6,   Activation::hardswish,
                           Activation::silu, Activation::sigmoid, Activation::identity};

double ref_forward(Activation a, double x) {
  switch (a) {
    case Activation::relu:
      return x > 0 ? x : 0;
    case Activation::relu6:
      return std::min(std::max(x, 0.0), 6.0);
    case Activation::hardswish:
      return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case Activation::silu:
      return x / (1 + std::exp(-x));
    case Activation::sigmoid:
      return 1 / (1 + std::exp(-x));
    case Activation::identity:
      return x;
  }
  return 0;
}

// PyTorch's derivative conventions: relu 0 at 0; relu6 0 at 0 and 6; hardswish 0 below -3,
// (2x + 3) / 6 on [-3, 3] (both ends included), 1 above 3.
double ref_grad(Activation a, double x) {
  switch (a) {
    case Activation::relu:
      return x > 0 ? 1 : 0;
    case Activation::relu6:
      return (x > 0 && x < 6) ? 1 : 0;
    case Activation::hardswish:
      return x < -3 ? 0 : (x <= 3 ? (2 * x + 3) / 6 : 1);
    case Activation::silu: {
      double s = 1 / (1 + std::exp(-x));
      return s + x * s * (1 - s);
    }
    case Activation::sigmoid: {
      double s = 1 / (1 + std::exp(-x));
      return s * (1 - s);
    }
    case Activation::identity:
      return 1;
  }
  return 0;
}

std::vector<double> inputs(int64_t n) {
  auto v = random_values(n, 21, -9.0, 9.0);
  // The kinks themselves, where the conventions matter.
  const double kinks[] = {0.0, 6.0, -3.0, 3.0, -0.0, 1e-30, -1e-30, 5.999999, -3.000001, 40, -40};
  for (size_t i = 0; i < std::size(kinks) && i < v.size(); ++i) v[i] = kinks[i];
  return v;
}

}  // namespace

TEST(Activation, ForwardAndBackwardMatchReference) {
  for (DType dt : kFloatTypes) {
    for (int64_t n : {0, 13, 70001}) {
      auto xv = inputs(n);
      auto dyv = random_values(n, 22);
      for (Activation a : kAll) {
        Buf x(dt, xv), dy(dt, dyv), y(dt, n), dx(dt, n);
        kernels::activation_forward(cpu_ctx(), a, dt, n, x.data(), y.data());
        kernels::activation_backward(cpu_ctx(), a, dt, n, x.data(), dy.data(), dx.data());
        std::vector<double> wy(xv.size()), wdx(xv.size());
        for (int64_t i = 0; i < n; ++i) {
          wy[static_cast<size_t>(i)] = ref_forward(a, x.get(i));
          wdx[static_cast<size_t>(i)] = ref_grad(a, x.get(i)) * dy.get(i);
        }
        std::string what = detail::str("act ", static_cast<int>(a), " ", dt, " n=", n);
        expect_near_all(y.values(), wy, tolerance(dt, 16), what + " forward");
        expect_near_all(dx.values(), wdx, tolerance(dt, 16), what + " backward");
      }
    }
  }
}

TEST(Activation, KinkConventionsExactly) {
  // x:        -3.5  -3   0   3   6   6.5
  std::vector<double> xv{-3.5, -3, 0, 3, 6, 6.5};
  std::vector<double> ones(xv.size(), 1.0);
  auto grads = [&](Activation a) {
    Buf x(DType::f32, xv), dy(DType::f32, ones), dx(DType::f32, 6);
    kernels::activation_backward(cpu_ctx(), a, DType::f32, 6, x.data(), dy.data(), dx.data());
    return dx.values();
  };
  EXPECT_EQ(grads(Activation::relu), (std::vector<double>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(grads(Activation::relu6), (std::vector<double>{0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(grads(Activation::hardswish), (std::vector<double>{0, -0.5, 0.5, 1.5, 1, 1}));
}

// NaN passes every activation forward, and relu, relu6, hardswish and identity pass dy at NaN
// (PyTorch's threshold_backward and hardtanh_backward zero the gradient only where x <= 0 or
// x >= 6, which NaN is not); silu and sigmoid give NaN. A NaN from an overflow so reaches the
// loss and the gradients, where the scaler sees it, in f32 and f64 alike.
TEST(Activation, NaNPassesForwardAndBackward) {
  for (DType t : {DType::f32, DType::f64}) {
    Buf x(t, std::vector<double>{NAN}), dy(t, std::vector<double>{1.5}), out(t, 1);
    for (Activation a : kAll) {
      SCOPED_TRACE(static_cast<int>(a));
      kernels::activation_forward(cpu_ctx(), a, t, 1, x.data(), out.data());
      EXPECT_TRUE(std::isnan(out.get(0)));
      kernels::activation_backward(cpu_ctx(), a, t, 1, x.data(), dy.data(), out.data());
      if (a == Activation::silu || a == Activation::sigmoid) {
        EXPECT_TRUE(std::isnan(out.get(0)));
      } else {
        EXPECT_EQ(out.get(0), 1.5);
      }
    }
  }
}

TEST(Activation, BackwardMatchesFiniteDifferencesF64) {
  const double h = 1e-6;
  auto xv = random_values(257, 23, -6.0, 6.0);
  auto dyv = random_values(257, 24);
  for (Activation a : kAll) {
    Buf x(DType::f64, xv), dy(DType::f64, dyv), dx(DType::f64, 257);
    kernels::activation_backward(cpu_ctx(), a, DType::f64, 257, x.data(), dy.data(), dx.data());
    std::vector<double> xp(xv), xm(xv);
    for (auto& v : xp) v += h;
    for (auto& v : xm) v -= h;
    Buf bp(DType::f64, xp), bm(DType::f64, xm), yp(DType::f64, 257), ym(DType::f64, 257);
    kernels::activation_forward(cpu_ctx(), a, DType::f64, 257, bp.data(), yp.data());
    kernels::activation_forward(cpu_ctx(), a, DType::f64, 257, bm.data(), ym.data());
    for (int64_t i = 0; i < 257; ++i) {
      double x0 = xv[static_cast<size_t>(i)];
      // Skip points within h of a kink, where the difference quotient straddles it.
      bool near_kink =
          std::abs(x0) < 2 * h || std::abs(x0 - 6) < 2 * h || std::abs(std::abs(x0) - 3) < 2 * h;
      if (near_kink) continue;
      double fd = (yp.get(i) - ym.get(i)) / (2 * h) * dyv[static_cast<size_t>(i)];
      ASSERT_NEAR(dx.get(i), fd, 1e-7) << "act " << static_cast<int>(a) << " x=" << x0;
    }
  }
}

TEST(Activation, RejectsIntegerDtypesOnCpu) {
  std::vector<int64_t> x(4), y(4);
  EXPECT_THROW(
      kernels::activation_forward(cpu_ctx(), Activation::relu, DType::i64, 4, x.data(), y.data()),
      Error);
}

TEST(Activation, F32SigmoidAndSiluRelativeAccuracyOverWideRange) {
  // The f32 path uses its own vectorised exp: check relative error where outputs are tiny too.
  const int64_t n = 4001;
  std::vector<float> x(n), y(n), s(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -80.0f + 160.0f * static_cast<float>(i) / (n - 1);
  kernels::activation_forward(cpu_ctx(), Activation::sigmoid, DType::f32, n, x.data(), y.data());
  kernels::activation_forward(cpu_ctx(), Activation::silu, DType::f32, n, x.data(), s.data());
  for (int64_t i = 0; i < n; ++i) {
    double xd = x[i], sig = 1 / (1 + std::exp(-xd));
    ASSERT_NEAR(y[i], sig, 1e-6 * sig) << "sigmoid x=" << xd;
    ASSERT_NEAR(s[i], xd * sig, 1e-6 * std::abs(xd * sig) + 1e-30) << "silu x=" << xd;
  }
  std::vector<float> special{std::nanf(""), 200.0f, -200.0f}, out(3);
  kernels::activation_forward(cpu_ctx(), Activation::sigmoid, DType::f32, 3, special.data(),
                              out.data());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_GE(out[2], 0.0f);
  EXPECT_LT(out[2], 1e-37f);
}
