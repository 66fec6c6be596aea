// Counter-based random kernels: values are a pure function of (seed, offset + i) (formulas of
// Note [Random formulas] recomputed here), distributions have the right moments, and dropout
// keeps about 1 - p with the 1 / (1 - p) scale and replayable masks.
#include "kernels/random.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernel_test_util.h"

using namespace frugal;
using namespace frugal::test;

TEST(Random, UniformIsPureFunctionOfSeedAndOffset) {
  const int64_t n = 50001;
  std::vector<float> a(n), b(n - 100);
  kernels::fill_uniform(cpu_ctx(), DType::f32, n, a.data(), 7, 1000, -2.0, 3.0);
  // A draw starting 100 later is the same sequence shifted (how a replay of a slice works).
  kernels::fill_uniform(cpu_ctx(), DType::f32, n - 100, b.data(), 7, 1100, -2.0, 3.0);
  for (int64_t i = 0; i < n - 100; ++i) ASSERT_EQ(a[i + 100], b[i]);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    double want = -2.0 + 5.0 * static_cast<double>(kernels::uniform01(7, 1000 + i));
    ASSERT_EQ(a[i], static_cast<float>(want));
    ASSERT_GE(a[i], -2.0f);
    ASSERT_LT(a[i], 3.0f);
    sum += a[i];
    sq += static_cast<double>(a[i]) * a[i];
  }
  double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.03);  // 5 / sqrt(12 n) ~ 0.0065 standard error
  EXPECT_NEAR(var, 25.0 / 12, 0.05);
  std::vector<float> c(n);
  kernels::fill_uniform(cpu_ctx(), DType::f32, n, c.data(), 8, 1000, -2.0, 3.0);
  int same = 0;
  for (int64_t i = 0; i < n; ++i) same += a[i] == c[i];
  EXPECT_LT(same, 50);  // another seed, another sequence
}

TEST(Random, NormalMomentsAndFormula) {
  const int64_t n = 200003;
  for (DType dt : kFloatTypes) {
    Buf y(dt, n);
    kernels::fill_normal(cpu_ctx(), dt, n, y.data(), 3, 17, 1.5, 2.0);
    double sum = 0, sq = 0, q = 0;
    for (int64_t i = 0; i < n; ++i) {
      double v = y.get(i);
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sq += v * v;
      q += std::abs(v - 1.5) < 2.0 ? 1 : 0;  // within one standard deviation
    }
    double mean = sum / n, var = sq / n - mean * mean;
    EXPECT_NEAR(mean, 1.5, 0.02);  // 2 / sqrt(n) ~ 0.0045 standard error
    EXPECT_NEAR(var, 4.0, 0.06);
    EXPECT_NEAR(q / n, 0.6827, 0.005);
    for (int64_t i : {int64_t{0}, int64_t{1}, n - 1}) {
      uint64_t k = 17 + 2 * static_cast<uint64_t>(i);  // n values use draws [17, 17 + 2n)
      double u1 = kernels::uniform01(3, k), u2 = kernels::uniform01(3, k + 1);
      double z = std::sqrt(-2 * std::log(1 - u1)) * std::cos(2 * M_PI * u2);
      EXPECT_NEAR(y.get(i), 1.5 + 2.0 * z, tolerance(dt, 4) * 10);
    }
  }
}

TEST(Dropout, KeepFractionScaleAndReplay) {
  const int64_t n = 100001;
  const double p = 0.3;
  for (DType dt : kFloatTypes) {
    auto xv = random_values(n, 61, 0.5, 2.0);  // never zero, so y == 0 means dropped
    Buf x(dt, xv), y(dt, n), y2(dt, n), y3(dt, n);
    std::vector<uint8_t> mask(n), mask2(n), mask3(n);
    kernels::dropout_forward(cpu_ctx(), dt, n, x.data(), p, 99, 5, nullptr, y.data(), mask.data());
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      bool keep = static_cast<double>(kernels::uniform01(99, 5 + i)) >= p;
      ASSERT_EQ(mask[i], keep ? 1 : 0);
      if (keep) {
        ASSERT_NEAR(y.get(i), x.get(i) / (1 - p), tolerance(dt, 2) * 4);
        ++kept;
      } else {
        ASSERT_EQ(y.get(i), 0.0);
      }
    }
    EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.006);  // ~4 standard errors
    kernels::dropout_forward(cpu_ctx(), dt, n, x.data(), p, 99, 5, nullptr, y2.data(),
                             mask2.data());
    EXPECT_EQ(mask, mask2);  // same seed and offset: same mask
    EXPECT_EQ(y.values(), y2.values());
    kernels::dropout_forward(cpu_ctx(), dt, n, x.data(), p, 99, 6, nullptr, y3.data(),
                             mask3.data());
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += mask[i] != mask3[i];
    EXPECT_GT(differ, n / 4);  // another offset: an independent mask (expected 2p(1-p) = 42%)
    // A counter read by the kernel adds to the offset (captured graphs): 2 + *base(3) is 5.
    const uint64_t base = 3;
    kernels::dropout_forward(cpu_ctx(), dt, n, x.data(), p, 99, 2, &base, y3.data(), mask3.data());
    EXPECT_EQ(mask3, mask);

    auto dyv = random_values(n, 62);
    Buf dy(dt, dyv), dx(dt, n);
    kernels::dropout_backward(cpu_ctx(), dt, n, dy.data(), mask.data(), p, dx.data());
    for (int64_t i = 0; i < n; ++i) {
      double want = mask[i] ? dy.get(i) / (1 - p) : 0.0;
      ASSERT_NEAR(dx.get(i), want, tolerance(dt, 2) * 4 * std::max(1.0, std::abs(want)));
    }
  }
}

TEST(Dropout, EdgeProbabilities) {
  std::vector<float> x{1, -2, 3, 4, 5}, y(5);
  std::vector<uint8_t> m(5);
  kernels::dropout_forward(cpu_ctx(), DType::f32, 5, x.data(), 0.0, 1, 0, nullptr, y.data(),
                           m.data());
  EXPECT_EQ(y, x);
  EXPECT_EQ(m, (std::vector<uint8_t>(5, 1)));
  kernels::dropout_forward(cpu_ctx(), DType::f32, 5, x.data(), 1.0, 1, 0, nullptr, y.data(),
                           m.data());
  EXPECT_EQ(y, (std::vector<float>(5, 0.0f)));  // p = 1 drops everything, no inf * 0
  EXPECT_EQ(m, (std::vector<uint8_t>(5, 0)));
  EXPECT_THROW(kernels::dropout_forward(cpu_ctx(), DType::f32, 5, x.data(), 1.5, 1, 0, nullptr,
                                        y.data(), m.data()),
               Error);
  kernels::dropout_forward(cpu_ctx(), DType::f32, 0, nullptr, 0.5, 1, 0, nullptr, nullptr, nullptr);
}
