// MobileNetV1: the paper's body. The width multiplier (alpha) rounds channels with
// make_divisible(c * width, 8) like the other models, so width 1.0 is the paper's network.
#include "models/mobilenet_v1.h"

namespace frugal::models {

DepthwiseSeparable::DepthwiseSeparable(int64_t in_channels, int64_t out_channels, int64_t stride) {
  dw_ = register_module(
      "dw",
      std::make_shared<Conv2dNormActivation>(
          in_channels, in_channels,
          ConvNormOptions{.kernel = 3, .stride = stride, .groups = in_channels, .act = Act::relu}));
  pw_ = register_module(
      "pw", std::make_shared<Conv2dNormActivation>(in_channels, out_channels,
                                                   ConvNormOptions{.kernel = 1, .act = Act::relu}));
}

Tensor DepthwiseSeparable::forward(const Tensor& x) { return (*pw_)((*dw_)(x)); }

MobileNetV1::MobileNetV1(const ModelConfig& cfg) {
  check_config("mobilenet_v1", cfg);
  auto wrap = cfg.checkpoint.block_wrapper();  // blocks in forward order
  struct Block {
    int64_t c, s;  // output channels, depthwise stride
  };
  // Table 1 of the paper; the last depthwise runs at stride 1 (the table's "s2" on a 7x7 input
  // is a known typo: the network ends at 7x7 for a 224 input, as every implementation has it).
  constexpr Block kBlocks[] = {{64, 1},  {128, 2},  {128, 1}, {256, 2}, {256, 1},
                               {512, 2}, {512, 1},  {512, 1}, {512, 1}, {512, 1},
                               {512, 1}, {1024, 2}, {1024, 1}};
  auto ch = [&](int64_t c) { return make_divisible(static_cast<double>(c) * cfg.width); };
  int64_t in = ch(32);
  features_ = register_module("features", std::make_shared<nn::Sequential>());
  // The stem is block 0 of the checkpoint policy, as in MobileNetV2 and EfficientNet.
  features_->push_back(wrap(std::make_shared<Conv2dNormActivation>(
      cfg.in_channels, in, ConvNormOptions{.kernel = 3, .stride = 2, .act = Act::relu})));
  for (const Block& b : kBlocks) {
    features_->push_back(wrap(std::make_shared<DepthwiseSeparable>(in, ch(b.c), b.s)));
    in = ch(b.c);
  }
  dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(cfg.dropout));
  classifier_ = register_module("classifier", std::make_shared<nn::Linear>(in, cfg.num_classes));
  checkpoint_ = cfg.checkpoint;
  init_weights(*this, LinearInit::normal_001);
}

Tensor MobileNetV1::forward(const Tensor& x) {
  FRUGAL_CHECK(x.ndim() == 4, "MobileNetV1: expected input [N, H, W, C], got ", describe(x));
  Tensor h = checkpoint_.run_features(*features_, x);  // [N, H/32, W/32, 1024]
  h = nn::functional::global_avg_pool(h);              // [N, 1, 1, 1024]
  return (*classifier_)((*dropout_)(h.flatten(1)));
}

}  // namespace frugal::models
