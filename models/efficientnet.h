// EfficientNet-B0 (Tan & Le 2019) exactly as torchvision builds it: MBConv blocks with
// squeeze-excitation and stochastic depth, SiLU, BatchNorm2d(eps 1e-5, momentum 0.1) (torchvision
// passes no norm_layer for B0-B4; only B5-B7 use eps 1e-3 / momentum 0.01).
// 5,288,548 parameters at 1000 classes, 3 channels, width 1.0.
//
//   auto net = std::make_shared<models::EfficientNetB0>(models::ModelConfig{.drop_connect = 0.2});
#pragma once

#include <memory>

#include "models/blocks.h"
#include "models/model_config.h"

namespace frugal::models {

// torchvision's MBConv: child "block" = [expand 1x1 CNA (when expanded != in)], depthwise kxk
// CNA, SqueezeExcitation(expanded, max(1, in / 4), SiLU), project 1x1 CNA without activation;
// child "stochastic_depth". out = x + stochastic_depth(block(x)) when stride 1 and in == out.
class MBConv : public nn::Module {
 public:
  MBConv(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
         double expand_ratio, double stochastic_depth_prob, bool recompute_depthwise = false);
  Tensor forward(const Tensor& x) override;  // [N, H, W, in] -> [N, H/stride, W/stride, out]
  std::string type_name() const override { return "MBConv"; }
  bool use_residual() const { return use_res_; }
  const StochasticDepth& stochastic_depth() const { return *sd_; }

 private:
  std::shared_ptr<nn::Sequential> block_;
  std::shared_ptr<StochasticDepth> sd_;
  bool use_res_;
};

// features.0 stem, features.1..7 stages (Sequentials of MBConv), features.8 1x1 conv to
// 4 * stage-7 channels; avgpool; classifier (Dropout, Linear).
class EfficientNetB0 : public nn::Module {
 public:
  explicit EfficientNetB0(const ModelConfig& cfg = {});
  Tensor forward(const Tensor& x) override;  // [N, H, W, in_channels] -> [N, num_classes]
  std::string type_name() const override { return "EfficientNet"; }

 private:
  std::shared_ptr<nn::Sequential> features_, classifier_;
  CheckpointPolicy checkpoint_;
};

}  // namespace frugal::models
