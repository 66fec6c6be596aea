// Gradient checking by central finite differences in f64 on the CPU (shared by the test folders).
// The function's output is reduced to a scalar with fixed random weights, so every output element
// contributes and a wrong gradient for any of them shows.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"

namespace frugal::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Returns the largest |analytic - numeric| / max(1, |numeric|) over all inputs that require grad.
inline double max_gradient_error(const Fn& f, std::vector<Tensor> inputs, double eps = 1e-6) {
  Generator gen(1234);
  Tensor probe = f(inputs);
  Tensor weights = randn(probe.shape(), gen, {.dtype = DType::f64});
  auto objective = [&](const std::vector<Tensor>& in) { return sum(mul(f(in), weights)); };
  for (Tensor& t : inputs) {
    if (t.requires_grad()) t.zero_grad();
  }
  objective(inputs).backward();
  double worst = 0;
  for (Tensor& t : inputs) {
    if (!t.requires_grad()) continue;
    Tensor g = t.grad();
    EXPECT_TRUE(g.defined()) << "no gradient reached an input " << describe(t);
    if (!g.defined()) return 1e9;
    std::vector<double> analytic = g.to_vector();
    double* x = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      double saved = x[i];
      autograd::NoGradGuard ng;
      x[i] = saved + eps;
      double up = objective(inputs).item();
      x[i] = saved - eps;
      double down = objective(inputs).item();
      x[i] = saved;
      double numeric = (up - down) / (2 * eps);
      double err =
          std::abs(analytic[static_cast<size_t>(i)] - numeric) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, err);
    }
  }
  return worst;
}

inline Tensor rand64(const Shape& s, uint64_t seed, bool requires_grad = true, double lo = -1,
                     double hi = 1) {
  Generator gen(seed);
  return rand(s, gen, {.dtype = DType::f64, .requires_grad = requires_grad}, lo, hi);
}

constexpr double kGradTolerance = 1e-6;

}  // namespace frugal::testing
