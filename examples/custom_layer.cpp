// Trains a small CNN that uses a custom op and layer (examples/custom_layer.h) on a synthetic
// data set and prints the loss falling. Build target: custom_layer.
#include "custom_layer.h"

#include <cstdio>

#include "nn/layers.h"
#include "optim/optimizer.h"

using namespace frugal;

int main() {
  manual_seed(0);
  Generator gen(1);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 8, 3, nn::Conv2dOptions{.padding = 1}));
  net->push_back(std::make_shared<custom::SquaredReLUScale>(8));
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(8, 3));
  for (auto& [name, p] : net->named_parameters())
    std::printf("%-10s %s\n", name.c_str(), p.shape().str().c_str());

  Tensor x = randn({24, 8, 8, 1}, gen);
  std::vector<double> labels;
  for (int i = 0; i < 24; ++i) labels.push_back(i % 3);
  Tensor y = from_vector(labels, Shape{24}, {.dtype = DType::i64});
  optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
  for (int step = 0; step <= 100; ++step) {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    if (step % 20 == 0) std::printf("step %3d  loss %.4f\n", step, loss.item());
  }
  return 0;
}
