// Cross-entropy with label smoothing: forward against the smoothed-target formula
// -sum_j q_j log p_j, backward against central finite differences in f64, stability with
// huge logits, and label checks.
#include "kernels/loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernel_test_util.h"

using namespace frugal;
using namespace frugal::test;

namespace {

// Reference: q = (1 - s) onehot(y) + s / C; loss = -sum_j q_j log softmax(x)_j.
double ref_loss(const std::vector<double>& row, int64_t y, double s) {
  double mx = row[0];
  for (double v : row) mx = std::max(mx, v);
  double z = 0;
  for (double v : row) z += std::exp(v - mx);
  double loss = 0;
  const double c = static_cast<double>(row.size());
  for (size_t j = 0; j < row.size(); ++j) {
    double logp = row[j] - mx - std::log(z);
    double q = (static_cast<int64_t>(j) == y ? 1 - s : 0) + s / c;
    loss -= q * logp;
  }
  return loss;
}

}  // namespace

TEST(CrossEntropy, ForwardMatchesSmoothedTargets) {
  const int64_t n = 37, c = 11;
  auto xv = random_values(n * c, 71, -4, 4);
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = (i * 7) % c;
  for (DType dt : kFloatTypes) {
    for (double s : {0.0, 0.1, 1.0}) {
      Buf x(dt, xv), loss(dt, n), lse(dt, n);
      kernels::cross_entropy_forward(cpu_ctx(), dt, n, c, x.data(), labels.data(), s, loss.data(),
                                     lse.data());
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> row(c);
        double z = 0;
        for (int64_t j = 0; j < c; ++j) {
          row[j] = x.get(i * c + j);
          z += std::exp(row[j]);
        }
        ASSERT_NEAR(loss.get(i), ref_loss(row, labels[i], s), tolerance(dt, c) * 4) << i;
        ASSERT_NEAR(lse.get(i), std::log(z), tolerance(dt, c) * 4) << i;
      }
    }
  }
}

TEST(CrossEntropy, HandComputedExample) {
  // logits [0, ln 2, ln 5] -> p = [1/8, 2/8, 5/8], label 2, smoothing 0.3, C = 3:
  // loss = -(0.7 + 0.1) ln(5/8) - 0.1 ln(1/8) - 0.1 ln(2/8)
  std::vector<double> x{0.0, std::log(2.0), std::log(5.0)};
  std::vector<int64_t> label{2};
  double loss = 0, lse = 0;
  kernels::cross_entropy_forward(cpu_ctx(), DType::f64, 1, 3, x.data(), label.data(), 0.3, &loss,
                                 &lse);
  double want = -0.8 * std::log(5.0 / 8) - 0.1 * std::log(1.0 / 8) - 0.1 * std::log(2.0 / 8);
  EXPECT_NEAR(loss, want, 1e-14);
  EXPECT_NEAR(lse, std::log(8.0), 1e-14);
  double dloss = 2.0, g[3];
  kernels::cross_entropy_backward(cpu_ctx(), DType::f64, 1, 3, x.data(), label.data(), 0.3, &lse,
                                  &dloss, g);
  EXPECT_NEAR(g[0], 2.0 * (1.0 / 8 - 0.1), 1e-14);
  EXPECT_NEAR(g[1], 2.0 * (2.0 / 8 - 0.1), 1e-14);
  EXPECT_NEAR(g[2], 2.0 * (5.0 / 8 - 0.8), 1e-14);
}

// No rows and no classes: nothing to do (the CPU kernel divided by the class count first).
TEST(CrossEntropy, NoRowsAndNoClassesDoNothing) {
  double untouched = 7;
  kernels::cross_entropy_forward(cpu_ctx(), DType::f64, 0, 0, nullptr, nullptr, 0.0, &untouched,
                                 &untouched);
  kernels::cross_entropy_backward(cpu_ctx(), DType::f64, 0, 0, nullptr, nullptr, 0.0, nullptr,
                                  nullptr, &untouched);
  EXPECT_EQ(untouched, 7);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferencesF64) {
  const int64_t n = 9, c = 13;
  auto xv = random_values(n * c, 72, -3, 3);
  auto dlv = random_values(n, 73);
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = (i * 5 + 2) % c;
  for (double s : {0.0, 0.15}) {
    // f(x) = sum_i dloss_i * loss_i(x)
    auto total = [&](const std::vector<double>& xs) {
      std::vector<double> loss(n), lse(n);
      kernels::cross_entropy_forward(cpu_ctx(), DType::f64, n, c, xs.data(), labels.data(), s,
                                     loss.data(), lse.data());
      double t = 0;
      for (int64_t i = 0; i < n; ++i) t += dlv[i] * loss[i];
      return t;
    };
    std::vector<double> loss(n), lse(n), grad(n * c);
    kernels::cross_entropy_forward(cpu_ctx(), DType::f64, n, c, xv.data(), labels.data(), s,
                                   loss.data(), lse.data());
    kernels::cross_entropy_backward(cpu_ctx(), DType::f64, n, c, xv.data(), labels.data(), s,
                                    lse.data(), dlv.data(), grad.data());
    const double h = 1e-6;
    for (int64_t k = 0; k < n * c; ++k) {
      auto xp = xv, xm = xv;
      xp[k] += h;
      xm[k] -= h;
      double fd = (total(xp) - total(xm)) / (2 * h);
      ASSERT_NEAR(grad[k], fd, 1e-8) << "element " << k << " smoothing " << s;
    }
  }
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  std::vector<float> x{1000.0f, 1001.0f, -1000.0f, 88.0f, 89.0f, 90.0f};
  std::vector<int64_t> labels{0, 2};
  std::vector<float> loss(2), lse(2), dloss{1, 1}, g(6);
  kernels::cross_entropy_forward(cpu_ctx(), DType::f32, 2, 3, x.data(), labels.data(), 0.0,
                                 loss.data(), lse.data());
  double l0 = 1001.0 + std::log1p(std::exp(-1.0));
  EXPECT_NEAR(loss[0], l0 - 1000.0, 1e-4);
  EXPECT_NEAR(lse[0], l0, 1e-3);
  kernels::cross_entropy_backward(cpu_ctx(), DType::f32, 2, 3, x.data(), labels.data(), 0.0,
                                  lse.data(), dloss.data(), g.data());
  for (float v : g) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(g[2], 0.0, 1e-6);
}

// A masked class (a -inf logit) leaves the unsmoothed loss finite, as PyTorch's: the smoothed
// term is +inf there, and weighting it by 0 gave NaN. With smoothing the loss is +inf, as
// PyTorch's is.
TEST(CrossEntropy, AMinusInfinityLogitLeavesTheUnsmoothedLossFinite) {
  std::vector<double> x{0.0, -INFINITY, 1.0};
  std::vector<int64_t> label{0};
  double loss = 0, lse = 0;
  kernels::cross_entropy_forward(cpu_ctx(), DType::f64, 1, 3, x.data(), label.data(), 0.0, &loss,
                                 &lse);
  EXPECT_NEAR(loss, 1.0 + std::log1p(std::exp(-1.0)), 1e-12);  // PyTorch: 1.3133
  kernels::cross_entropy_forward(cpu_ctx(), DType::f64, 1, 3, x.data(), label.data(), 0.1, &loss,
                                 &lse);
  EXPECT_EQ(loss, INFINITY);
}

TEST(CrossEntropy, BadLabelThrowsNamingIt) {
  std::vector<float> x(2 * 4, 0.5f), loss(2), lse(2);
  for (int64_t bad : {4, -1}) {
    std::vector<int64_t> labels{1, bad};
    try {
      kernels::cross_entropy_forward(cpu_ctx(), DType::f32, 2, 4, x.data(), labels.data(), 0.0,
                                     loss.data(), lse.data());
      FAIL() << "label " << bad << " accepted";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(detail::str("label ", bad, " of row 1")), std::string::npos) << msg;
      EXPECT_NE(msg.find("4 classes"), std::string::npos) << msg;
    }
    std::vector<float> g(8);
    EXPECT_THROW(
        kernels::cross_entropy_backward(cpu_ctx(), DType::f32, 2, 4, x.data(), labels.data(), 0.0,
                                        lse.data(), loss.data(), g.data()),
        Error);
  }
  kernels::cross_entropy_forward(cpu_ctx(), DType::f32, 0, 4, nullptr, nullptr, 0.0, nullptr,
                                 nullptr);
}
