// Shared helpers for the kernel tests: the CPU context, seeded random data and typed buffers
// that convert to and from double for reference comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "kernels/context.h"

namespace frugal::test {

inline kernels::Context cpu_ctx() { return kernels::Context::of(Device::cpu()); }

// n values uniform in [lo, hi) from a fixed seed (never all zeros).
inline std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -2.0,
                                         double hi = 2.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

// A buffer of f32 or f64 holding the given values, readable back as double.
class Buf {
 public:
  Buf(DType dtype, int64_t n) : dtype_(dtype), n_(n), bytes_(static_cast<size_t>(n) + 1) {}
  Buf(DType dtype, const std::vector<double>& v) : Buf(dtype, static_cast<int64_t>(v.size())) {
    for (int64_t i = 0; i < n_; ++i) set(i, v[static_cast<size_t>(i)]);
  }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  int64_t size() const { return n_; }
  double get(int64_t i) const {
    return dtype_ == DType::f32 ? static_cast<double>(reinterpret_cast<const float*>(data())[i])
                                : reinterpret_cast<const double*>(data())[i];
  }
  void set(int64_t i, double v) {
    if (dtype_ == DType::f32) {
      reinterpret_cast<float*>(data())[i] = static_cast<float>(v);
    } else {
      reinterpret_cast<double*>(data())[i] = v;
    }
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) v[static_cast<size_t>(i)] = get(i);
    return v;
  }

 private:
  DType dtype_;
  int64_t n_;
  std::vector<uint64_t> bytes_;  // one 8-byte slot per element: room for either dtype
};

// Relative-plus-absolute tolerance of a result computed in `dtype` with round-off that grows
// with `terms` summed values.
inline double tolerance(DType dtype, double terms = 1) {
  double eps = dtype == DType::f32 ? 1.2e-7 : 2.3e-16;
  return 8 * eps * std::max(1.0, std::sqrt(terms));
}

inline void expect_near_all(const std::vector<double>& got, const std::vector<double>& want,
                            double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = rel * std::max(1.0, std::abs(want[i]));
    ASSERT_NEAR(got[i], want[i], tol) << what << " at element " << i;
  }
}

const DType kFloatTypes[] = {DType::f32, DType::f64};

}  // namespace frugal::test
