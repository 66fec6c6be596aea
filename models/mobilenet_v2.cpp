// MobileNetV2: the inverted-residual table of the paper, built with torchvision's names.
#include "models/mobilenet_v2.h"

#include <cmath>

#include "core/ops.h"

namespace frugal::models {

InvertedResidual::InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride,
                                   int64_t expand_ratio, bool recompute_depthwise) {
  FRUGAL_CHECK(stride == 1 || stride == 2, "InvertedResidual: stride must be 1 or 2, got ", stride);
  const auto hidden =
      static_cast<int64_t>(std::llround(static_cast<double>(in_channels * expand_ratio)));
  use_res_ = stride == 1 && in_channels == out_channels;
  conv_ = register_module("conv", std::make_shared<nn::Sequential>());
  if (expand_ratio != 1) {
    conv_->push_back(std::make_shared<Conv2dNormActivation>(
        in_channels, hidden, ConvNormOptions{.kernel = 1, .act = Act::relu6}));
  }
  conv_->push_back(
      std::make_shared<Conv2dNormActivation>(hidden, hidden,
                                             ConvNormOptions{.kernel = 3,
                                                             .stride = stride,
                                                             .groups = hidden,
                                                             .act = Act::relu6,
                                                             .recompute = recompute_depthwise}));
  conv_->push_back(
      std::make_shared<nn::Conv2d>(hidden, out_channels, 1, nn::Conv2dOptions{.bias = false}));
  conv_->push_back(std::make_shared<nn::BatchNorm2d>(out_channels));
}

Tensor InvertedResidual::forward(const Tensor& x) {
  Tensor y = (*conv_)(x);
  return use_res_ ? x + y : y;
}

MobileNetV2::MobileNetV2(const ModelConfig& cfg) {
  check_config("mobilenet_v2", cfg);
  auto wrap = cfg.checkpoint.block_wrapper();  // blocks in forward order
  struct Stage {
    int64_t t, c, n, s;  // expand ratio, channels, repeats, first stride
  };
  constexpr Stage kStages[] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                               {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int64_t in = make_divisible(32 * cfg.width);
  const int64_t last = make_divisible(1280 * std::max(1.0, cfg.width));

  features_ = register_module("features", std::make_shared<nn::Sequential>());
  // The stem and the last 1x1 conv are blocks too: checkpointed, the stem keeps nothing but the
  // images the caller holds anyway (its conv output is the largest tensor after block 2's).
  features_->push_back(wrap(std::make_shared<Conv2dNormActivation>(
      cfg.in_channels, in, ConvNormOptions{.kernel = 3, .stride = 2, .act = Act::relu6})));
  for (const Stage& st : kStages) {
    const int64_t out = make_divisible(static_cast<double>(st.c) * cfg.width);
    for (int64_t i = 0; i < st.n; ++i) {
      features_->push_back(wrap(std::make_shared<InvertedResidual>(in, out, i == 0 ? st.s : 1, st.t,
                                                                   cfg.recompute_depthwise)));
      in = out;
    }
  }
  features_->push_back(wrap(std::make_shared<Conv2dNormActivation>(
      in, last, ConvNormOptions{.kernel = 1, .act = Act::relu6})));

  classifier_ = register_module("classifier", std::make_shared<nn::Sequential>());
  classifier_->push_back(std::make_shared<nn::Dropout>(cfg.dropout));
  classifier_->push_back(std::make_shared<nn::Linear>(last, cfg.num_classes));
  init_weights(*this, LinearInit::normal_001);
  checkpoint_ = cfg.checkpoint;
}

Tensor MobileNetV2::forward(const Tensor& x) {
  FRUGAL_CHECK(x.ndim() == 4, "MobileNetV2: expected input [N, H, W, C], got ", describe(x));
  Tensor h = checkpoint_.run_features(*features_, x);  // [N, H/32, W/32, last]
  h = nn::functional::global_avg_pool(h);              // [N, 1, 1, last]
  return (*classifier_)(h.flatten(1));                 // [N, classes]
}

}  // namespace frugal::models
