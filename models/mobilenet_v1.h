// MobileNetV1 (Howard et al. 2017, Table 1): a 3x3 stride-2 stem and 13 depthwise-separable
// blocks, then global average pooling and one Linear. Convs have no bias (each is followed by
// batch norm). 4,231,976 parameters at 1000 classes, 3 channels, width 1.0.
// Names: features.0.{0,1} (stem conv, bn), features.i.dw.{0,1}, features.i.pw.{0,1},
// classifier.{weight,bias}; a Dropout (cfg.dropout) named "dropout" precedes the classifier.
#pragma once

#include <memory>

#include "models/blocks.h"
#include "models/model_config.h"

namespace frugal::models {

// Depthwise 3x3 (stride s) + BN + ReLU, then pointwise 1x1 + BN + ReLU.
class DepthwiseSeparable : public nn::Module {
 public:
  DepthwiseSeparable(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;  // [N, H, W, in] -> [N, H/s, W/s, out]
  std::string type_name() const override { return "DepthwiseSeparable"; }

 private:
  std::shared_ptr<Conv2dNormActivation> dw_, pw_;
};

class MobileNetV1 : public nn::Module {
 public:
  explicit MobileNetV1(const ModelConfig& cfg = {});
  Tensor forward(const Tensor& x) override;  // [N, H, W, in_channels] -> [N, num_classes]
  std::string type_name() const override { return "MobileNetV1"; }

 private:
  std::shared_ptr<nn::Sequential> features_;
  std::shared_ptr<nn::Dropout> dropout_;
  std::shared_ptr<nn::Linear> classifier_;
  CheckpointPolicy checkpoint_;
};

}  // namespace frugal::models
