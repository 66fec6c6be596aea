// Batch norm in evaluation mode against the formula, for every channel and position (the module
// tests check training mode element by element; this one covers eval across channels).
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/layers.h"

using namespace frugal;

TEST(BatchNormEval, EveryChannelUsesItsOwnRunningStatistics) {
  Generator gen(3);
  nn::BatchNorm2d bn(5);
  {
    autograd::NoGradGuard no_grad;  // parameters are written as under torch.no_grad()
    copy_(bn.running_mean, rand({5}, gen, {}, -1, 1));
    copy_(bn.running_var, rand({5}, gen, {}, 0.5, 2));
    copy_(bn.weight, rand({5}, gen, {}, 0.5, 1.5));
    copy_(bn.bias, rand({5}, gen, {}, -0.5, 0.5));
  }
  bn.eval();
  Tensor x = randn({2, 3, 4, 5}, gen);
  std::vector<double> y = bn(x).to_vector(), xv = x.to_vector();
  std::vector<double> rm = bn.running_mean.to_vector(), rv = bn.running_var.to_vector();
  std::vector<double> g = bn.weight.to_vector(), b = bn.bias.to_vector();
  for (size_t i = 0; i < y.size(); ++i) {
    size_t c = i % 5;
    double expect = (xv[i] - rm[c]) / std::sqrt(rv[c] + 1e-5) * g[c] + b[c];
    EXPECT_NEAR(y[i], expect, 1e-5) << "element " << i << " channel " << c;
  }
}
