// gemm against a triple loop in double, for every transpose combination, beta 0 and 1, odd
// sizes and the empty cases.
#include <gtest/gtest.h>

#include <limits>

#include "kernels/kernel_test_util.h"
#include "kernels/matmul.h"

using namespace frugal;
using namespace frugal::test;

namespace {

void check_gemm(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double beta) {
  Buf a(dt, random_values(m * k, 51)), b(dt, random_values(k * n, 52));
  auto c0 = random_values(m * n, 53);
  Buf c(dt, c0), c_in(dt, c0);
  if (beta == 0) {  // beta 0 must not read c: poison it
    for (int64_t i = 0; i < m * n; ++i) c.set(i, std::numeric_limits<double>::quiet_NaN());
  }
  kernels::gemm(cpu_ctx(), dt, ta, tb, m, n, k, a.data(), b.data(), beta, c.data());
  std::vector<double> want(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = ta ? a.get(p * m + i) : a.get(i * k + p);
        double bv = tb ? b.get(j * k + p) : b.get(p * n + j);
        s += av * bv;
      }
      double prev = beta == 0 ? 0 : beta * c_in.get(i * n + j);
      want[static_cast<size_t>(i * n + j)] = s + prev;
    }
  }
  expect_near_all(c.values(), want, tolerance(dt, static_cast<double>(k)) * 4,
                  detail::str("gemm ", dt, " ta=", ta, " tb=", tb, " m=", m, " n=", n, " k=", k,
                              " beta=", beta));
}

}  // namespace

TEST(Gemm, AllTransposesAndBetas) {
  for (DType dt : kFloatTypes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (double beta : {0.0, 1.0}) {
          check_gemm(dt, ta, tb, 7, 5, 3, beta);
          check_gemm(dt, ta, tb, 33, 17, 65, beta);
          check_gemm(dt, ta, tb, 1, 9, 130, beta);   // a row vector (linear layer, batch 1)
          check_gemm(dt, ta, tb, 131, 1, 20, beta);  // a column
        }
      }
    }
  }
}

TEST(Gemm, LargeThreaded) { check_gemm(DType::f32, false, true, 200, 150, 257, 1.0); }

TEST(Gemm, EmptySizes) {
  std::vector<float> c{1, 2, 3, 4, 5, 6};
  kernels::gemm(cpu_ctx(), DType::f32, false, false, 2, 3, 0, nullptr, nullptr, 1.0, c.data());
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4, 5, 6}));  // empty sum, accumulate: unchanged
  kernels::gemm(cpu_ctx(), DType::f32, false, false, 2, 3, 0, nullptr, nullptr, 0.0, c.data());
  EXPECT_EQ(c, (std::vector<float>(6, 0.0f)));  // empty sum, overwrite: zeros
  kernels::gemm(cpu_ctx(), DType::f32, false, false, 0, 3, 4, nullptr, nullptr, 0.0, nullptr);
  EXPECT_THROW(kernels::gemm(cpu_ctx(), DType::bf16, false, false, 1, 1, 1, c.data(), c.data(),
                             0.0, c.data()),
               Error);
}
