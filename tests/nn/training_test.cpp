// A small MobileNet-like CNN (conv, BN, ReLU6, depthwise conv, pool, linear) must drive its loss
// on a fixed batch to under 5% of the starting value.
#include <gtest/gtest.h>

#include "core/ops.h"
#include "nn/layers.h"
#include "optim/optimizer.h"

using namespace frugal;

TEST(Training, SmallCnnOverfitsAFixedBatch) {
  manual_seed(11);
  Generator gen(5);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(
      std::make_shared<nn::Conv2d>(1, 8, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(8));
  net->push_back(std::make_shared<nn::ReLU6>());
  net->push_back(std::make_shared<nn::Conv2d>(
      8, 8, 3, nn::Conv2dOptions{.stride = 2, .padding = 1, .groups = 8, .bias = false}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(8));
  net->push_back(std::make_shared<nn::ReLU6>());
  net->push_back(std::make_shared<nn::Conv2d>(8, 16, 1));
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(16, 4));

  Tensor x = randn({16, 8, 8, 1}, gen);
  std::vector<double> lab;
  for (int i = 0; i < 16; ++i) lab.push_back(i % 4);
  Tensor y = from_vector(lab, Shape{16}, {.dtype = DType::i64});
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::CrossEntropyLoss loss_fn;
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    Tensor loss = loss_fn(net->forward(x), y);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  EXPECT_LT(last, 0.05 * first) << "first " << first << " last " << last;
}
