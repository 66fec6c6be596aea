// sum_to against a double reference over every reduction pattern the network produces (bias
// gradients, broadcast backward, per-sample, last-dim, full), plus accuracy of a long sum and
// argmax_rows with ties and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/shape.h"
#include "kernels/kernel_test_util.h"
#include "kernels/reduce.h"

using namespace frugal;
using namespace frugal::test;

namespace {

void check_sum_to(const Shape& in, const Shape& out, double scale = 1.0) {
  auto v = random_values(in.numel(), 41);
  // Reference: add every input element into the output element it maps to.
  std::vector<double> want(static_cast<size_t>(out.numel()), 0.0);
  int64_t max_terms = in.numel() / std::max<int64_t>(1, out.numel());
  for (DType dt : kFloatTypes) {
    Buf x(dt, v), y(dt, out.numel());
    std::fill(want.begin(), want.end(), 0.0);
    for (int64_t i = 0; i < in.numel(); ++i) {
      int64_t r = i, o = 0, ostride = 1;
      for (int64_t d = in.ndim() - 1; d >= 0; --d) {
        int64_t c = r % in[d];
        r /= in[d];
        if (out[d] != 1) o += c * ostride;
        ostride *= out[d];
      }
      want[static_cast<size_t>(o)] += x.get(i);
    }
    for (auto& w : want) w *= scale;
    kernels::sum_to(cpu_ctx(), dt, kernels::make_reduction(in, out), x.data(), scale, y.data());
    // The kernel accumulates in double: error is the final rounding to dt plus a little.
    double tol = dt == DType::f32 ? 4e-7 * std::sqrt(static_cast<double>(max_terms))
                                  : 1e-14 * std::sqrt(static_cast<double>(max_terms));
    expect_near_all(y.values(), want, tol, detail::str(in, " -> ", out, " ", dt));
  }
}

}  // namespace

TEST(SumTo, LeadingDims) {  // bias gradients, [C] broadcast backward
  check_sum_to(Shape{5, 7}, Shape{1, 7});
  check_sum_to(Shape{2, 9, 11, 13}, Shape{1, 1, 1, 13});
  check_sum_to(Shape{8, 31, 29, 24}, Shape{1, 1, 1, 24}, 0.5);  // large: threaded over rows
  check_sum_to(Shape{3000, 1}, Shape{1, 1});
}

TEST(SumTo, LastDims) {
  check_sum_to(Shape{7, 5}, Shape{7, 1});
  check_sum_to(Shape{3, 4, 129}, Shape{3, 4, 1});
  check_sum_to(Shape{2, 40000}, Shape{2, 1});    // few long rows: split across threads
  check_sum_to(Shape{300, 400}, Shape{300, 1});  // many rows
}

TEST(SumTo, PerSampleAndMixed) {
  check_sum_to(Shape{3, 9, 11, 7}, Shape{3, 1, 1, 7});  // SE / per-sample broadcast backward
  check_sum_to(Shape{4, 60, 70, 5}, Shape{4, 1, 1, 5});
  check_sum_to(Shape{2, 70000, 3}, Shape{1, 70000, 1});  // reduce outer and inner
  check_sum_to(Shape{6, 5, 4, 3, 2}, Shape{6, 1, 4, 1, 2});
  check_sum_to(Shape{6, 5, 4, 3, 2}, Shape{1, 5, 1, 3, 1});
  check_sum_to(Shape{3, 1, 4}, Shape{3, 1, 1});
  check_sum_to(Shape{3000, 2, 50}, Shape{1, 2, 1});  // few outputs, many positions
  check_sum_to(Shape{1, 1, 60000}, Shape{1, 1, 60000});  // nothing reduced: copy
}

TEST(SumTo, FullReduction) {
  check_sum_to(Shape{13}, Shape{1});
  check_sum_to(Shape{7, 9, 5}, Shape{1, 1, 1}, 1.0 / 315);  // a mean
  check_sum_to(Shape{1000003}, Shape{1});
  check_sum_to(Shape{}, Shape{});
}

TEST(SumTo, LongF32SumStaysAccurate) {
  // 2^22 copies of 0.1f: a float running sum drifts by percents; the kernel must not.
  const int64_t n = int64_t{1} << 22;
  std::vector<float> x(static_cast<size_t>(n), 0.1f);
  float y = 0;
  kernels::sum_to(cpu_ctx(), DType::f32, kernels::make_reduction(Shape{n}, Shape{1}), x.data(), 1.0,
                  &y);
  EXPECT_NEAR(y, static_cast<double>(0.1f) * static_cast<double>(n), 1.0);
  // And as a column sum (bias gradient of [n / 4, 4]).
  std::vector<float> cols(4);
  kernels::sum_to(cpu_ctx(), DType::f32, kernels::make_reduction(Shape{n / 4, 4}, Shape{1, 4}),
                  x.data(), 1.0, cols.data());
  for (float c : cols) EXPECT_NEAR(c, static_cast<double>(0.1f) * static_cast<double>(n / 4), 0.25);
}

TEST(SumTo, EmptyInputGivesZeros) {
  std::vector<float> y(3, 5.0f);
  kernels::sum_to(cpu_ctx(), DType::f32, kernels::make_reduction(Shape{0, 3}, Shape{1, 3}),
                  nullptr, 1.0, y.data());
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0}));
  kernels::sum_to(cpu_ctx(), DType::f32, kernels::make_reduction(Shape{3, 0}, Shape{3, 0}),
                  nullptr, 1.0, nullptr);
  EXPECT_THROW(kernels::make_reduction(Shape{3, 4}, Shape{3, 2}), Error);
  EXPECT_THROW(kernels::sum_to(cpu_ctx(), DType::i64,
                               kernels::make_reduction(Shape{3}, Shape{1}), y.data(), 1.0,
                               y.data()),
               Error);
}

TEST(ArgmaxRows, FirstMaximumAndNaN) {
  for (DType dt : kFloatTypes) {
    const int64_t rows = 1001, cols = 37;
    auto v = random_values(rows * cols, 42);
    Buf x(dt, v);
    x.set(0 * cols + 5, 10.0);  // a tie: the first one wins
    x.set(0 * cols + 9, 10.0);
    x.set(1 * cols + 3, std::numeric_limits<double>::quiet_NaN());  // NaN is the maximum
    x.set(1 * cols + 4, 50.0);
    x.set(2 * cols + 0, std::numeric_limits<double>::quiet_NaN());
    std::vector<int64_t> got(static_cast<size_t>(rows));
    kernels::argmax_rows(cpu_ctx(), dt, rows, cols, x.data(), got.data());
    EXPECT_EQ(got[0], 5);
    EXPECT_EQ(got[1], 3);
    EXPECT_EQ(got[2], 0);
    for (int64_t i = 3; i < rows; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < cols; ++j) {
        if (x.get(i * cols + j) > x.get(i * cols + best)) best = j;
      }
      ASSERT_EQ(got[static_cast<size_t>(i)], best) << "row " << i;
    }
  }
  kernels::argmax_rows(cpu_ctx(), DType::f32, 0, 5, nullptr, nullptr);
}
