// The shared blocks against reference loops: channel rounding, squeeze-excitation in f64,
// stochastic depth's per-sample mask and gradient, the inverted residual's skip connection.
#include "models/blocks.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/factory.h"
#include "core/ops.h"
#include "kernels/random.h"
#include "model_test_util.h"
#include "models/mobilenet_v2.h"

using namespace frugal;

TEST(Blocks, MakeDivisibleMatchesTorchvision) {
  // Values of torchvision's _make_divisible(v, 8).
  EXPECT_EQ(models::make_divisible(32 * 1.0), 32);
  EXPECT_EQ(models::make_divisible(32 * 0.25), 8);
  EXPECT_EQ(models::make_divisible(16 * 0.25), 8);    // never below the divisor
  EXPECT_EQ(models::make_divisible(96 * 0.35), 32);   // 33.6 -> 32 (within 10%)
  EXPECT_EQ(models::make_divisible(160 * 0.35), 56);  // 56.0
  EXPECT_EQ(models::make_divisible(24 * 1.1), 24);    // 26.4 -> 24 (>= 0.9 * 26.4)
  EXPECT_EQ(models::make_divisible(37.0), 40);        // int(41) // 8 * 8 = 40
  EXPECT_EQ(models::make_divisible(19.0), 24);        // 23 // 8 * 8 = 16 < 0.9 * 19, so + 8
  EXPECT_EQ(models::make_divisible(1280 * 0.75), 960);
}

TEST(Blocks, Conv2dNormActivationNamesAndPadding) {
  models::Conv2dNormActivation cna(5, 7, {.kernel = 3, .stride = 2, .act = models::Act::silu});
  std::vector<std::string> names;
  for (auto& [n, t] : cna.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "1.weight", "1.bias"}));
  EXPECT_EQ(cna.size(), 3u);
  EXPECT_EQ(cna[2]->type_name(), "SiLU");
  Generator gen(3);
  Tensor y = cna.forward(randn(Shape{2, 9, 11, 5}, gen));
  EXPECT_EQ(y.shape(), (Shape{2, 5, 6, 7}));  // padding (k-1)/2 keeps ceil(H / stride)
  models::Conv2dNormActivation plain(4, 4, {.kernel = 1, .act = models::Act::none});
  EXPECT_EQ(plain.size(), 2u);
}

TEST(Blocks, SqueezeExcitationMatchesReference) {
  const int64_t n = 2, h = 3, w = 5, c = 6, s = 3;
  models::SqueezeExcitation se(c, s, models::Act::silu);
  auto params = se.named_parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].first, "fc1.weight");
  EXPECT_EQ(params[3].first, "fc2.bias");
  Generator gen(11);
  Tensor x = randn(Shape{n, h, w, c}, gen);
  std::vector<double> w1 = params[0].second.to_vector(), b1 = params[1].second.to_vector();
  std::vector<double> w2 = params[2].second.to_vector(), b2 = params[3].second.to_vector();
  std::vector<double> xv = x.to_vector(), yv = se.forward(x).to_vector();
  double worst = 0;
  for (int64_t b = 0; b < n; ++b) {
    std::vector<double> pooled(c, 0.0), hidden(s, 0.0), scale(c, 0.0);
    for (int64_t p = 0; p < h * w; ++p) {
      for (int64_t k = 0; k < c; ++k) pooled[k] += xv[(b * h * w + p) * c + k] / (h * w);
    }
    for (int64_t j = 0; j < s; ++j) {
      double a = b1[j];
      for (int64_t k = 0; k < c; ++k) a += w1[j * c + k] * pooled[k];  // w1 [s, 1, 1, c]
      hidden[j] = a / (1 + std::exp(-a));                              // SiLU
    }
    for (int64_t k = 0; k < c; ++k) {
      double a = b2[k];
      for (int64_t j = 0; j < s; ++j) a += w2[k * s + j] * hidden[j];
      scale[k] = 1 / (1 + std::exp(-a));
    }
    for (int64_t p = 0; p < h * w; ++p) {
      for (int64_t k = 0; k < c; ++k) {
        int64_t i = (b * h * w + p) * c + k;
        worst = std::max(worst, std::abs(yv[i] - xv[i] * scale[k]));
      }
    }
  }
  EXPECT_LT(worst, 1e-5);
}

TEST(Blocks, StochasticDepthDropsWholeSamples) {
  const int64_t n = 64;
  const double p = 0.3;
  Generator gen(77);
  gen.set_offset(5);
  models::StochasticDepth sd(p, gen);
  Generator data_gen(1);
  Tensor x = randn(Shape{n, 2, 3, 4}, data_gen).requires_grad_(true);
  Tensor y = sd.forward(x);
  EXPECT_EQ(gen.offset(), 5u + n);  // one draw per sample
  std::vector<double> xv = x.to_vector(), yv = y.to_vector();
  int64_t kept = 0;
  for (int64_t b = 0; b < n; ++b) {
    bool keep = kernels::uniform01(77, 5 + static_cast<uint64_t>(b)) >= p;
    kept += keep;
    for (int64_t i = 0; i < 24; ++i) {
      double want = keep ? xv[b * 24 + i] / (1 - p) : 0.0;
      ASSERT_NEAR(yv[b * 24 + i], want, 1e-5) << "sample " << b;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, n);
  // The gradient is the same per-sample mask.
  sum(y).backward();
  std::vector<double> g = x.grad().to_vector();
  for (int64_t b = 0; b < n; ++b) {
    bool keep = kernels::uniform01(77, 5 + static_cast<uint64_t>(b)) >= p;
    EXPECT_NEAR(g[b * 24 + 7], keep ? 1 / (1 - p) : 0.0, 1e-5);
  }
  // Eval (and p == 0) is the identity, without drawing.
  sd.eval();
  EXPECT_TRUE(sd.forward(x).same(x));
  EXPECT_EQ(gen.offset(), 5u + n);
  models::StochasticDepth off(0.0, gen);
  EXPECT_TRUE(off.forward(x).same(x));
  // p == 1 drops everything.
  models::StochasticDepth all(1.0, gen);
  for (double v : all.forward(x).to_vector()) ASSERT_EQ(v, 0.0);
  EXPECT_THROW(models::StochasticDepth(1.5), Error);
}

TEST(Blocks, InvertedResidualSkipConnection) {
  Generator gen(5);
  models::InvertedResidual res(8, 8, 1, 6), down(8, 16, 2, 6);
  EXPECT_TRUE(res.use_residual());
  EXPECT_FALSE(down.use_residual());
  res.eval();
  Tensor x = randn(Shape{2, 5, 5, 8}, gen);
  Tensor body = frugal::testing::submodule(res, "conv")->forward(x);
  std::vector<double> want = (x + body).to_vector(), got = res.forward(x).to_vector();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6);
  EXPECT_EQ(down.forward(x).shape(), (Shape{2, 3, 3, 16}));
}
