// Gradient checks (f64 finite differences) for every NN op and each conv configuration.
#include "gradcheck.h"
#include "nn/functional.h"

using namespace frugal;
namespace F = frugal::nn::functional;
using frugal::testing::kGradTolerance;
using frugal::testing::max_gradient_error;
using frugal::testing::rand64;

namespace {

struct ConvCase {
  const char* name;
  int64_t n, h, w, c, k, kernel;
  F::Conv2dOptions opt;
  bool bias;
};

}  // namespace

TEST(GradCheckNN, Conv2dConfigurations) {
  const ConvCase cases[] = {
      {"1x1", 2, 3, 4, 3, 5, 1, {}, true},
      {"3x3 pad 1", 1, 5, 4, 2, 3, 3, {.padding = 1}, true},
      {"stride 2", 2, 5, 5, 3, 2, 3, {.stride = 2, .padding = 1}, false},
      {"dilation 2", 1, 6, 5, 2, 2, 3, {.padding = 2, .dilation = 2}, true},
      {"groups 2", 1, 4, 4, 4, 6, 3, {.padding = 1, .groups = 2}, true},
      {"depthwise", 2, 5, 4, 3, 3, 3, {.padding = 1, .groups = 3}, false},
      {"depthwise stride 2", 1, 6, 6, 4, 4, 3, {.stride = 2, .padding = 1, .groups = 4}, true},
  };
  uint64_t seed = 100;
  for (const ConvCase& cc : cases) {
    Tensor x = rand64({cc.n, cc.h, cc.w, cc.c}, seed++);
    Tensor w = rand64({cc.k, cc.kernel, cc.kernel, cc.c / cc.opt.groups}, seed++);
    Tensor b = cc.bias ? rand64({cc.k}, seed++) : Tensor();
    F::Conv2dOptions opt = cc.opt;
    std::vector<Tensor> in = {x, w};
    if (cc.bias) in.push_back(b);
    double err = max_gradient_error(
        [opt](const std::vector<Tensor>& v) {
          return F::conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), opt);
        },
        in);
    EXPECT_LT(err, kGradTolerance) << cc.name;
  }
}

// A frozen weight with a trained bias (fine-tuning the biases alone): the bias gradient comes from
// the weight-gradient kernel, which reads x, so x is kept for it.
TEST(GradCheckNN, Conv2dWithAFrozenWeight) {
  const Tensor w = rand64({4, 3, 3, 2}, 11, /*requires_grad=*/false);
  for (bool train_x : {true, false}) {
    Tensor x = rand64({2, 5, 4, 2}, 12, train_x), b = rand64({4}, 13);
    std::vector<Tensor> in = {b};
    if (train_x) in.push_back(x);
    double err = max_gradient_error(
        [w, x, train_x](const std::vector<Tensor>& v) {
          return F::conv2d(train_x ? v[1] : x, w, v[0], {.padding = 1});
        },
        in);
    EXPECT_LT(err, kGradTolerance) << "x trained: " << train_x;
  }
}

TEST(GradCheckNN, Linear) {
  Tensor x = rand64({4, 3}, 1), w = rand64({5, 3}, 2), b = rand64({5}, 3);
  EXPECT_LT(max_gradient_error([](auto& v) { return F::linear(v[0], v[1], v[2]); }, {x, w, b}),
            kGradTolerance);
}

TEST(GradCheckNN, BatchNormTrainingAndEval) {
  Tensor x = rand64({3, 2, 2, 4}, 4, true, -2, 2);
  Tensor gamma = rand64({4}, 5, true, 0.5, 1.5), beta = rand64({4}, 6);
  EXPECT_LT(max_gradient_error(
                [](auto& v) { return F::batch_norm(v[0], v[1], v[2], Tensor(), Tensor()); },
                {x, gamma, beta}),
            1e-5);
  Tensor rm = rand64({4}, 7, false), rv = rand64({4}, 8, false, 0.5, 2.0);
  EXPECT_LT(
      max_gradient_error(
          [&](auto& v) { return F::batch_norm(v[0], v[1], v[2], rm, rv, {.training = false}); },
          {x, gamma, beta}),
      kGradTolerance);
}

// Without weight and bias (torch's affine=False): gamma 1 and beta 0, forward and gradient of x,
// training and evaluation, with and without an activation. They used to be refused.
TEST(GradCheckNN, BatchNormWithoutWeightAndBias) {
  Tensor x = rand64({3, 2, 2, 4}, 9, true, -2, 2);
  Tensor ones = full({4}, 1.0, {.dtype = DType::f64}),
         zeros = full({4}, 0.0, {.dtype = DType::f64});
  Tensor rm = rand64({4}, 7, false), rv = rand64({4}, 8, false, 0.5, 2.0);
  for (bool training : {true, false}) {
    for (F::Activation act : {F::Activation::identity, F::Activation::relu}) {
      SCOPED_TRACE(training ? "training" : "eval");
      const F::BatchNormOptions o{.training = training, .activation = act};
      Tensor none = F::batch_norm(x, Tensor(), Tensor(), training ? Tensor() : rm,
                                  training ? Tensor() : rv, o);
      Tensor unit = F::batch_norm(x.detach(), ones, zeros, training ? Tensor() : rm,
                                  training ? Tensor() : rv, o);
      EXPECT_EQ(none.to_vector(), unit.to_vector());
      EXPECT_LT(max_gradient_error(
                    [&](auto& v) {
                      return F::batch_norm(v[0], Tensor(), Tensor(), training ? Tensor() : rm,
                                           training ? Tensor() : rv, o);
                    },
                    {x}),
                1e-5);
    }
  }
}

TEST(GradCheckNN, Activations) {
  // Values away from the kinks at 0, 6 and +-3, where the derivative is not defined.
  std::vector<double> vals;
  for (int i = 0; i < 24; ++i) vals.push_back(-7.45 + 0.61 * i);
  Tensor x = from_vector(vals, Shape{4, 6}, {.dtype = DType::f64, .requires_grad = true});
  EXPECT_LT(max_gradient_error([](auto& v) { return F::relu(v[0]); }, {x}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& v) { return F::relu6(v[0]); }, {x}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& v) { return F::hardswish(v[0]); }, {x}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& v) { return F::silu(v[0]); }, {x}), kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& v) { return F::sigmoid(v[0]); }, {x}), kGradTolerance);
}

TEST(GradCheckNN, Pooling) {
  Tensor x = rand64({2, 5, 6, 3}, 9);
  EXPECT_LT(max_gradient_error([](auto& v) { return F::max_pool2d(v[0], {.kernel = 2}); }, {x}),
            kGradTolerance);
  EXPECT_LT(
      max_gradient_error(
          [](auto& v) { return F::max_pool2d(v[0], {.kernel = 3, .stride = 2, .padding = 1}); },
          {x}),
      kGradTolerance);
  EXPECT_LT(
      max_gradient_error(
          [](auto& v) { return F::avg_pool2d(v[0], {.kernel = 3, .stride = 2, .padding = 1}); },
          {x}),
      kGradTolerance);
  EXPECT_LT(max_gradient_error(
                [](auto& v) {
                  return F::avg_pool2d(
                      v[0], {.kernel = 3, .stride = 1, .padding = 1, .count_include_pad = false});
                },
                {x}),
            kGradTolerance);
  EXPECT_LT(max_gradient_error([](auto& v) { return F::global_avg_pool(v[0]); }, {x}),
            kGradTolerance);
}

TEST(GradCheckNN, DropoutWithFixedSeed) {
  Tensor x = rand64({4, 8}, 10);
  // The same generator state each call gives the same mask, so the function is deterministic.
  EXPECT_LT(max_gradient_error(
                [](auto& v) {
                  Generator gen(77);
                  return F::dropout(v[0], 0.3, true, gen);
                },
                {x}),
            kGradTolerance);
}

TEST(GradCheckNN, CrossEntropyWithSmoothingAndReductions) {
  Tensor logits = rand64({5, 4}, 11, true, -3, 3);
  Tensor labels = from_vector({0, 3, 1, 1, 2}, Shape{5}, {.dtype = DType::i64});
  for (double s : {0.0, 0.1}) {
    for (F::Reduction r : {F::Reduction::mean, F::Reduction::sum, F::Reduction::none}) {
      EXPECT_LT(max_gradient_error(
                    [&](auto& v) {
                      return F::cross_entropy(v[0], labels, {.label_smoothing = s, .reduction = r});
                    },
                    {logits}),
                kGradTolerance)
          << "smoothing " << s;
    }
  }
}
