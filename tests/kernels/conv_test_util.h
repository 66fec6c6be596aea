// Helpers shared by the CPU conv, batch-norm and pooling tests: seeded random data and a
// closeness check against double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace frugal::testing {

inline std::vector<double> random_vec(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& e : v) e = dist(gen);
  return v;
}

// d loss() / d v[i] for every i by central differences of step h; v ends as it started.
template <typename Loss>
std::vector<double> central_difference(Loss&& loss, std::vector<double>& v, double h) {
  std::vector<double> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double lp = loss();
    v[i] = keep - h;
    const double lm = loss();
    v[i] = keep;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

template <typename T>
std::vector<T> cast_vec(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// The values the kernel sees after rounding to T, so f32 references start from the same data.
template <typename T>
std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<double>(static_cast<T>(v[i]));
  return r;
}

// Expects |got - ref| <= tol * max(1, max |ref|) elementwise, reporting the worst element.
template <typename T>
void expect_close(const std::vector<double>& ref, const std::vector<T>& got, double tol,
                  const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double scale = 1.0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst element " << worst_i << " got "
                                << static_cast<double>(got[worst_i]) << " want " << ref[worst_i];
}

template <typename T>
constexpr double tolerance() {
  return sizeof(T) == 4 ? 2e-5 : 1e-11;
}

}  // namespace frugal::testing
