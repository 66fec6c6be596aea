// Models at small sizes: output shapes for 1-channel 32x32 inputs, a backward pass that reaches
// every parameter, and what train/eval switches (dropout, stochastic depth, batch norm).
#include <gtest/gtest.h>

#include <cmath>

#include "core/factory.h"
#include "core/ops.h"
#include "model_test_util.h"
#include "models/registry.h"
#include "nn/functional.h"

using namespace frugal;

namespace {

const models::ModelConfig kSmall{.num_classes = 10, .in_channels = 1, .width = 0.25};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

}  // namespace

TEST(Models, SmallInputShapesInTrainAndEval) {
  Generator gen(21);
  Tensor x = randn(Shape{2, 32, 32, 1}, gen);
  for (const std::string& name : models::names()) {
    auto net = models::create(name, kSmall);
    Tensor y = net->forward(x);
    EXPECT_EQ(y.shape(), (Shape{2, 10})) << name;
    net->eval();
    Tensor z = net->forward(x);
    EXPECT_EQ(z.shape(), (Shape{2, 10})) << name;
    for (double v : z.to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

TEST(Models, MobileNetV2BackwardReachesEveryParameter) {
  manual_seed(3);
  auto net = models::create("mobilenet_v2", kSmall);
  Generator gen(8);
  Tensor x = randn(Shape{3, 32, 32, 1}, gen);
  Tensor labels = from_vector({1, 7, 4}, Shape{3}, {.dtype = DType::i64});
  Tensor loss = nn::functional::cross_entropy(net->forward(x), labels);
  loss.backward();
  int64_t checked = 0;
  for (const auto& [name, p] : net->named_parameters()) {
    Tensor g = p.grad();
    ASSERT_TRUE(g.defined()) << "no gradient for " << name;
    EXPECT_EQ(g.shape(), p.shape()) << name;
    double norm = 0;
    for (double v : g.to_vector()) {
      ASSERT_TRUE(std::isfinite(v)) << name;
      norm += v * v;
    }
    EXPECT_GT(norm, 0.0) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 158);
  // The input gets no gradient it did not ask for; the loss is a sane cross-entropy.
  EXPECT_FALSE(x.grad().defined());
  EXPECT_GT(loss.item(), 0.0);
  EXPECT_LT(loss.item(), 10.0);
}

TEST(Models, EvalIsDeterministicTrainIsNot) {
  Generator gen(4);
  Tensor x = randn(Shape{4, 32, 32, 1}, gen);
  auto net = models::create("mobilenet_v2",
                            {.num_classes = 10, .in_channels = 1, .width = 0.25, .dropout = 0.5});
  net->eval();
  Tensor e1 = net->forward(x), e2 = net->forward(x);
  EXPECT_EQ(max_abs_diff(e1, e2), 0.0);
  net->train();
  Tensor t1 = net->forward(x), t2 = net->forward(x);
  EXPECT_GT(max_abs_diff(t1, t2), 1e-6);  // a fresh dropout mask each call
  EXPECT_GT(max_abs_diff(t1, e1), 1e-6);
}

TEST(Models, StochasticDepthOnlyActsInTraining) {
  Generator gen(6);
  Tensor x = randn(Shape{4, 32, 32, 1}, gen);
  models::ModelConfig cfg{.num_classes = 10, .in_channels = 1, .width = 0.25, .dropout = 0.0};
  // Without dropout or stochastic depth a training forward is deterministic (batch statistics
  // of the same batch) ...
  cfg.drop_connect = 0.0;
  auto plain = models::create("efficientnet_b0", cfg);
  EXPECT_EQ(max_abs_diff(plain->forward(x), plain->forward(x)), 0.0);
  // ... with it, residual branches are dropped per sample, differently each call ...
  cfg.drop_connect = 0.8;
  auto deep = models::create("efficientnet_b0", cfg);
  EXPECT_GT(max_abs_diff(deep->forward(x), deep->forward(x)), 1e-6);
  // ... and in eval it is the identity again.
  deep->eval();
  EXPECT_EQ(max_abs_diff(deep->forward(x), deep->forward(x)), 0.0);
}

TEST(Models, BatchNormRunningStatsFollowTheMode) {
  Generator gen(9);
  Tensor x = add(mul(randn(Shape{2, 32, 32, 1}, gen), 3.0), 2.0);
  auto net = models::create("resnet18", kSmall);
  auto buffers = net->named_buffers();
  ASSERT_EQ(buffers[0].first, "bn1.running_mean");
  ASSERT_EQ(buffers[2].first, "bn1.num_batches_tracked");
  net->eval();
  Tensor e1 = net->forward(x);
  EXPECT_EQ(buffers[0].second.to_vector(), std::vector<double>(16, 0.0));  // untouched in eval
  EXPECT_EQ(buffers[2].second.item(), 0.0);
  net->train();
  net->forward(x);
  EXPECT_EQ(buffers[2].second.item(), 1.0);
  double moved = 0;
  for (double v : buffers[0].second.to_vector()) moved += std::abs(v);
  EXPECT_GT(moved, 0.0);  // the running mean took a step towards the batch mean
  net->eval();
  Tensor e2 = net->forward(x);
  EXPECT_GT(max_abs_diff(e1, e2), 1e-6);  // eval reads the updated running statistics
}
