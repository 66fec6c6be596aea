// Fused optimizer steps against PyTorch's formulas recomputed in double over three steps, and
// the loss scaler's skip: a non-zero found_inf leaves parameters and state bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/kernel_test_util.h"
#include "kernels/optim.h"

using namespace frugal;
using namespace frugal::test;

namespace {

std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " " << i;
  }
}

}  // namespace

TEST(Sgd, ThreeStepsMatchPyTorchFormula) {
  const int64_t n = 1031;
  struct Case {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (Case cs : {Case{0, 0, 0, false}, Case{0, 0, 0.01, false}, Case{0.9, 0, 0, false},
                  Case{0.9, 0.1, 1e-3, false}, Case{0.9, 0, 1e-2, true}}) {
    std::vector<float> p = to_f32(random_values(n, 81)), buf(n, 0.0f);
    std::vector<double> rp(p.begin(), p.end()), rbuf(n, 0.0);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = to_f32(random_values(n, 82 + step));
      kernels::SgdParams sp;
      sp.lr = 0.05;
      sp.momentum = cs.momentum;
      sp.dampening = cs.dampening;
      sp.weight_decay = cs.wd;
      sp.nesterov = cs.nesterov;
      sp.first_step = step == 0;
      kernels::sgd_step(cpu_ctx(), n, p.data(), g.data(), buf.data(), sp, nullptr);
      for (int64_t i = 0; i < n; ++i) {
        double d = g[i] + cs.wd * rp[i];
        if (cs.momentum != 0) {
          rbuf[i] = step == 0 ? d : cs.momentum * rbuf[i] + (1 - cs.dampening) * d;
          d = cs.nesterov ? d + cs.momentum * rbuf[i] : rbuf[i];
        }
        rp[i] -= 0.05 * d;
      }
      std::string what = detail::str("sgd momentum=", cs.momentum, " damp=", cs.dampening,
                                      " wd=", cs.wd, " nesterov=", cs.nesterov, " step ", step);
      expect_close(p, rp, 1e-6, what);
      if (cs.momentum != 0) expect_close(buf, rbuf, 1e-6, what + " buf");
    }
  }
}

TEST(AdamW, ThreeStepsWithBiasCorrection) {
  const int64_t n = 517;
  const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.05;
  std::vector<float> p = to_f32(random_values(n, 91)), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> g = to_f32(random_values(n, 92 + static_cast<uint32_t>(t), -1e-3, 1e-3));
    kernels::AdamWParams ap;
    ap.lr = lr;
    ap.beta1 = b1;
    ap.beta2 = b2;
    ap.eps = eps;
    ap.weight_decay = wd;
    ap.step = t;
    kernels::adamw_step(cpu_ctx(), n, p.data(), g.data(), m.data(), v.data(), ap, nullptr);
    for (int64_t i = 0; i < n; ++i) {
      rp[i] *= 1 - lr * wd;
      rm[i] = b1 * rm[i] + (1 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1 - b2) * g[i] * g[i];
      double mhat = rm[i] / (1 - std::pow(b1, t)), vhat = rv[i] / (1 - std::pow(b2, t));
      rp[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
    expect_close(p, rp, 1e-6, detail::str("adamw param step ", t));
    expect_close(m, rm, 1e-6, "adamw exp_avg");
    expect_close(v, rv, 1e-6, "adamw exp_avg_sq");
  }
  // At step 1 the bias-corrected update is lr * g / (|g| + eps) ~ lr per element: check the
  // correction was applied (without it the step would be about 3x larger).
  std::vector<float> p1{1.0f}, g1{1e-3f}, m1{0}, v1{0};
  kernels::AdamWParams ap;
  ap.lr = lr;
  ap.weight_decay = 0;
  kernels::adamw_step(cpu_ctx(), 1, p1.data(), g1.data(), m1.data(), v1.data(), ap, nullptr);
  EXPECT_NEAR(p1[0], 1.0 - lr, 1e-6);
}

TEST(Optim, FoundInfSkipsBitIdentically) {
  const int64_t n = 333;
  std::vector<float> p = to_f32(random_values(n, 101)), g = to_f32(random_values(n, 102));
  std::vector<float> buf = to_f32(random_values(n, 103)), m = to_f32(random_values(n, 104));
  std::vector<float> v = to_f32(random_values(n, 105, 0.0, 1.0));
  const auto p0 = p, buf0 = buf, m0 = m, v0 = v;
  float inf_flag = 1.0f, clear = 0.0f;
  kernels::SgdParams sp;
  sp.momentum = 0.9;
  sp.first_step = false;
  kernels::sgd_step(cpu_ctx(), n, p.data(), g.data(), buf.data(), sp, &inf_flag);
  kernels::AdamWParams ap;
  ap.step = 4;
  kernels::adamw_step(cpu_ctx(), n, p.data(), g.data(), m.data(), v.data(), ap, &inf_flag);
  EXPECT_EQ(std::memcmp(p.data(), p0.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(buf.data(), buf0.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(m.data(), m0.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(v.data(), v0.data(), n * 4), 0);
  // A clear flag steps as normal.
  kernels::sgd_step(cpu_ctx(), n, p.data(), g.data(), buf.data(), sp, &clear);
  EXPECT_NE(std::memcmp(p.data(), p0.data(), n * 4), 0);
  EXPECT_NE(std::memcmp(buf.data(), buf0.data(), n * 4), 0);
  kernels::adamw_step(cpu_ctx(), 0, nullptr, nullptr, nullptr, nullptr, ap, nullptr);
}
