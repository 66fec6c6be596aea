// ResNet-18 (He et al. 2016) exactly as torchvision builds it: conv1, bn1, relu, maxpool,
// layer1..4 of two BasicBlocks, avgpool, fc. 11,689,512 parameters at 1000 classes, 3 channels,
// width 1.0. cfg.width scales the 64/128/256/512 stage widths (make_divisible(c * width, 8));
// cfg.dropout and cfg.drop_connect are unused (torchvision's ResNet has neither).
#pragma once

#include <memory>

#include "models/blocks.h"
#include "models/model_config.h"

namespace frugal::models {

// conv1 3x3 (stride) -> bn1 -> relu -> conv2 3x3 -> bn2, plus the identity or
// downsample (1x1 conv stride + BN) when the shape changes; relu after the sum.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;  // [N, H, W, in] -> [N, H/stride, W/stride, out]
  std::string type_name() const override { return "BasicBlock"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> downsample_;  // null when the identity fits
};

class ResNet18 : public nn::Module {
 public:
  explicit ResNet18(const ModelConfig& cfg = {});
  Tensor forward(const Tensor& x) override;  // [N, H, W, in_channels] -> [N, num_classes]
  std::string type_name() const override { return "ResNet"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::MaxPool2d> maxpool_;
  std::shared_ptr<nn::Sequential> layers_[4];
  // The four stages in order, unregistered (their names stay layer1..layer4): what
  // CheckpointPolicy::run_features splits into segments.
  nn::Sequential stages_;
  std::shared_ptr<nn::Linear> fc_;
  CheckpointPolicy checkpoint_;
};

}  // namespace frugal::models
