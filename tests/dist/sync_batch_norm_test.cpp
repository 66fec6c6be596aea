#include "dist/sync_batch_norm.h"

#include <gtest/gtest.h>

#include "core/factory.h"
#include "core/ops.h"
#include "dist/rank_threads.h"
#include "gradcheck.h"
#include "models/registry.h"
#include "nn/functional.h"
#include "nn/layers.h"

namespace frugal {
namespace {

namespace F = nn::functional;
using test::run_ranks;

std::shared_ptr<dist::ProcessGroup> borrowed(dist::SocketGroup& g) {
  return std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
}

void expect_near(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], tol) << what << " element " << i;
}

// all_reduce_sum is differentiable: each rank's loss depends on every rank's input, so a rank's
// input gradient sums what every rank's loss says about the total.
TEST(AllReduceSum, ItsBackwardSumsTheGradientsOfEveryRank) {
  std::vector<std::vector<double>> grads(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const double r = g.rank();
    Tensor x = from_vector({1.0 + r, 2.0 + r}, {2}).requires_grad_();
    Tensor total = dist::all_reduce_sum(mul(x, 3.0 + r), borrowed(g));    // sum of a_r * x_r
    sum(mul(total, from_vector({10.0 * (r + 1), 1.0}, {2}))).backward();  // weights w_r
    grads[static_cast<size_t>(g.rank())] = x.grad().to_vector();
  });
  for (const std::string& e : errors) ASSERT_TRUE(e.empty()) << e;
  // d/dx_r of sum_q w_q . total = a_r * (w_0 + w_1) = a_r * {30, 2}.
  EXPECT_EQ(grads[0], (std::vector<double>{90, 6}));
  EXPECT_EQ(grads[1], (std::vector<double>{120, 8}));
}

TEST(SyncBatchNorm, GradientCheckOnOneRank) {
  auto errors = run_ranks(1, [&](dist::SocketGroup& g) {
    auto group = borrowed(g);
    F::CrossReplicaSum across = [group](const Tensor& t) { return dist::all_reduce_sum(t, group); };
    // f64 (gradient checks' dtype) through the socket group's f64 reduction.
    Tensor x = frugal::testing::rand64({3, 2, 2, 4}, 4, true, -2, 2);
    Tensor gamma = frugal::testing::rand64({4}, 5, true, 0.5, 1.5);
    Tensor beta = frugal::testing::rand64({4}, 6);
    double err = frugal::testing::max_gradient_error(
        [&](auto& v) { return F::sync_batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), across); },
        {x, gamma, beta});
    EXPECT_LT(err, 1e-5);
  });
  for (const std::string& e : errors) EXPECT_TRUE(e.empty()) << e;
}

// One value a channel over all replicas has no unbiased variance: the running variance stays
// finite (it was var * 1 / 0, NaN for good).
TEST(SyncBatchNorm, OneValueAChannelKeepsTheRunningVarianceFinite) {
  F::CrossReplicaSum alone = [](const Tensor& t) { return t; };  // one replica
  Tensor x = from_vector({1, 2, 3}, {1, 3});
  Tensor gamma = ones({3}), beta = zeros({3});
  Tensor rm = zeros({3}), rv = ones({3});
  (void)F::sync_batch_norm(x, gamma, beta, rm, rv, alone);
  for (double v : rv.to_vector()) EXPECT_NEAR(v, 0.9, 1e-6);  // 0.9 * 1 + 0.1 * 0
  const std::vector<double> mean = rm.to_vector();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(mean[i], 0.1 * static_cast<double>(i + 1), 1e-6);
}

TEST(SyncBatchNorm, TwoRanksOnHalfBatchesAreOneBatchNormOverTheWhole) {
  constexpr int64_t kN = 6, kC = 5;
  Generator gen(3);
  Tensor x_all = add(mul(randn({kN, 3, 2, kC}, gen), 2.0), 0.5);
  Tensor weights = randn({kN, 3, 2, kC}, gen);  // loss = sum(y * weights)
  Tensor gamma0 = add(randn({kC}, gen), 1.0), beta0 = randn({kC}, gen);

  // One process, the fused batch norm on all rows.
  Tensor x_ref = x_all.clone().requires_grad_();
  Tensor g_ref = gamma0.clone().requires_grad_(), b_ref = beta0.clone().requires_grad_();
  Tensor rm_ref = zeros({kC}), rv_ref = ones({kC});
  Tensor y_ref = F::batch_norm(x_ref, g_ref, b_ref, rm_ref, rv_ref);
  sum(mul(y_ref, weights)).backward();

  struct RankOut {
    Tensor y, x_grad, gamma_grad, beta_grad, rm, rv;
  };
  std::vector<RankOut> out(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    auto group = borrowed(g);
    const int64_t half = kN / 2, start = g.rank() * half;
    Tensor x = slice_rows(x_all, start, half).requires_grad_();
    Tensor gamma = gamma0.clone().requires_grad_(), beta = beta0.clone().requires_grad_();
    Tensor rm = zeros({kC}), rv = ones({kC});
    Tensor y = F::sync_batch_norm(x, gamma, beta, rm, rv, [group](const Tensor& t) {
      return dist::all_reduce_sum(t, group);
    });
    sum(mul(y, slice_rows(weights, start, half))).backward();
    out[static_cast<size_t>(g.rank())] = {y.detach(), x.grad(), gamma.grad(), beta.grad(), rm, rv};
  });
  for (const std::string& e : errors) ASSERT_TRUE(e.empty()) << e;
  for (int r = 0; r < 2; ++r) {
    const RankOut& o = out[static_cast<size_t>(r)];
    const std::string who = "rank " + std::to_string(r);
    expect_near(o.y, slice_rows(y_ref.detach(), r * 3, 3), 2e-5, who + " output");
    // The input gradient is the whole batch's loss gradient: the statistics' gradients arrive
    // from both ranks through all_reduce_sum's backward.
    expect_near(o.x_grad, slice_rows(x_ref.grad(), r * 3, 3), 2e-5, who + " input gradient");
    expect_near(o.rm, rm_ref, 1e-6, who + " running mean");
    expect_near(o.rv, rv_ref, 1e-5, who + " running variance (unbiased over all 36 rows)");
  }
  // Each rank's parameter gradient is its rows' share; DataParallel's average is half the sum.
  expect_near(add(out[0].gamma_grad, out[1].gamma_grad), g_ref.grad(), 2e-5, "gamma gradient");
  expect_near(add(out[0].beta_grad, out[1].beta_grad), b_ref.grad(), 2e-5, "beta gradient");
}

TEST(SyncBatchNorm, ConvertReachesEveryBatchNormAndTrainsThroughTheModel) {
  models::ModelConfig mc;
  mc.width = 0.25;
  mc.num_classes = 3;
  mc.in_channels = 1;
  std::vector<std::shared_ptr<nn::Module>> nets;
  for (int r = 0; r < 2; ++r) {
    manual_seed(1);
    nets.push_back(models::create("mobilenet_v2", mc));
  }
  int64_t expected = 0;
  for (auto& [name, t] : nets[0]->named_buffers()) {
    expected += name.find("running_mean") != std::string::npos ? 1 : 0;
  }
  std::vector<int64_t> converted(2);
  std::vector<std::vector<double>> stats(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    converted[r] = dist::convert_sync_batchnorm(*nets[r], borrowed(g));
    Generator gen(10 + r);  // different images on each rank
    Tensor logits = (*nets[r])(randn({2, 16, 16, 1}, gen));
    sum(logits).backward();
    for (auto& [name, t] : nets[r]->named_buffers()) {
      if (name.find("running_var") != std::string::npos) {
        for (double v : t.to_vector()) stats[r].push_back(v);
      }
    }
  });
  for (const std::string& e : errors) ASSERT_TRUE(e.empty()) << e;
  EXPECT_GT(expected, 10);
  EXPECT_EQ(converted[0], expected);
  // Global statistics: the ranks' running variances agree although their images differ.
  ASSERT_EQ(stats[0].size(), stats[1].size());
  for (size_t i = 0; i < stats[0].size(); ++i) ASSERT_NEAR(stats[0][i], stats[1][i], 1e-5) << i;
}

}  // namespace
}  // namespace frugal
