// MobileNetV2 (Sandler et al. 2018) exactly as torchvision builds it: names, shapes, ReLU6,
// init. 3,504,872 parameters at 1000 classes, 3 channels, width 1.0.
//
//   auto net = std::make_shared<models::MobileNetV2>(models::ModelConfig{.num_classes = 10});
//   Tensor logits = net->forward(x);  // x [N, H, W, C] -> [N, classes]
#pragma once

#include <memory>

#include "models/blocks.h"
#include "models/model_config.h"

namespace frugal::models {

// torchvision's InvertedResidual: child "conv" is a Sequential of
// [expand 1x1 CNA (when expand_ratio != 1)], depthwise 3x3 CNA, project Conv2d 1x1, BatchNorm2d;
// x + conv(x) when stride 1 and in == out.
class InvertedResidual : public nn::Module {
 public:
  InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t expand_ratio,
                   bool recompute_depthwise = false);
  Tensor forward(const Tensor& x) override;  // [N, H, W, in] -> [N, H/stride, W/stride, out]
  std::string type_name() const override { return "InvertedResidual"; }
  bool use_residual() const { return use_res_; }

 private:
  std::shared_ptr<nn::Sequential> conv_;
  bool use_res_;
};

// features (Sequential of 19) -> global average pool -> classifier (Dropout, Linear).
class MobileNetV2 : public nn::Module {
 public:
  explicit MobileNetV2(const ModelConfig& cfg = {});
  Tensor forward(const Tensor& x) override;  // [N, H, W, in_channels] -> [N, num_classes]
  std::string type_name() const override { return "MobileNetV2"; }

 private:
  std::shared_ptr<nn::Sequential> features_, classifier_;
  CheckpointPolicy checkpoint_;
};

}  // namespace frugal::models
