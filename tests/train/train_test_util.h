// A tiny CNN and a learnable synthetic loader for trainer tests on the CPU.
#pragma once

#include <memory>

#include "data/loader.h"
#include "data/synthetic.h"
#include "nn/layers.h"

namespace frugal::train_test {

inline std::shared_ptr<nn::Sequential> tiny_cnn(int64_t channels = 8) {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(
      std::make_shared<nn::Conv2d>(1, channels, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(channels));
  net->push_back(std::make_shared<nn::ReLU6>());
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(channels, 4));
  return net;
}

// `samples` 8x8x1 images of 4 classes, batches of `batch`, the last partial one dropped.
inline std::unique_ptr<data::DataLoader> tiny_loader(int64_t samples = 64, int64_t batch = 16) {
  auto ds = std::make_shared<data::SyntheticDataset>(Shape{8, 8, 1}, 4, samples, 7,
                                                     data::SyntheticOptions{.noise = 0.2f});
  return std::make_unique<data::DataLoader>(
      ds,
      data::LoaderOptions{
          .batch_size = batch, .shuffle = true, .drop_last = true, .num_workers = 0, .seed = 1});
}

}  // namespace frugal::train_test
