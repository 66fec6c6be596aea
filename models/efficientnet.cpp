// EfficientNet-B0: torchvision's MBConv table (width multiplier applied through
// make_divisible, depth multiplier 1) and its linearly growing stochastic-depth schedule.
#include "models/efficientnet.h"

#include "core/ops.h"

namespace frugal::models {

MBConv::MBConv(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
               double expand_ratio, double stochastic_depth_prob, bool recompute_depthwise) {
  FRUGAL_CHECK(stride == 1 || stride == 2, "MBConv: stride must be 1 or 2, got ", stride);
  use_res_ = stride == 1 && in_channels == out_channels;
  const int64_t expanded = make_divisible(static_cast<double>(in_channels) * expand_ratio);
  block_ = register_module("block", std::make_shared<nn::Sequential>());
  if (expanded != in_channels) {
    block_->push_back(std::make_shared<Conv2dNormActivation>(
        in_channels, expanded, ConvNormOptions{.kernel = 1, .act = Act::silu}));
  }
  block_->push_back(
      std::make_shared<Conv2dNormActivation>(expanded, expanded,
                                             ConvNormOptions{.kernel = kernel,
                                                             .stride = stride,
                                                             .groups = expanded,
                                                             .act = Act::silu,
                                                             .recompute = recompute_depthwise}));
  block_->push_back(std::make_shared<SqueezeExcitation>(
      expanded, std::max<int64_t>(1, in_channels / 4), Act::silu));
  block_->push_back(std::make_shared<Conv2dNormActivation>(
      expanded, out_channels, ConvNormOptions{.kernel = 1, .act = Act::none}));
  sd_ =
      register_module("stochastic_depth", std::make_shared<StochasticDepth>(stochastic_depth_prob));
}

Tensor MBConv::forward(const Tensor& x) {
  Tensor y = (*block_)(x);
  if (!use_res_) return y;
  return (*sd_)(y) + x;
}

EfficientNetB0::EfficientNetB0(const ModelConfig& cfg) {
  check_config("efficientnet_b0", cfg);
  auto wrap = cfg.checkpoint.block_wrapper();  // blocks in forward order
  struct Stage {
    double expand;
    int64_t kernel, stride, in, out, layers;
  };
  constexpr Stage kStages[] = {{1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},  {6, 5, 2, 24, 40, 2},
                               {6, 3, 2, 40, 80, 3},  {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4},
                               {6, 3, 1, 192, 320, 1}};
  auto ch = [&](int64_t c) { return make_divisible(static_cast<double>(c) * cfg.width); };
  int64_t total_blocks = 0;
  for (const Stage& st : kStages) total_blocks += st.layers;

  features_ = register_module("features", std::make_shared<nn::Sequential>());
  features_->push_back(wrap(std::make_shared<Conv2dNormActivation>(
      cfg.in_channels, ch(kStages[0].in),
      ConvNormOptions{.kernel = 3, .stride = 2, .act = Act::silu})));
  int64_t block_id = 0;
  for (const Stage& st : kStages) {
    auto stage = std::make_shared<nn::Sequential>();
    for (int64_t i = 0; i < st.layers; ++i) {
      // torchvision: p * block_id / total_blocks, so the first block never drops.
      double p =
          cfg.drop_connect * static_cast<double>(block_id) / static_cast<double>(total_blocks);
      stage->push_back(wrap(std::make_shared<MBConv>(i == 0 ? ch(st.in) : ch(st.out), ch(st.out),
                                                     st.kernel, i == 0 ? st.stride : 1, st.expand,
                                                     p, cfg.recompute_depthwise)));
      ++block_id;
    }
    features_->push_back(stage);
  }
  const int64_t last_in = ch(kStages[6].out), last = 4 * last_in;
  features_->push_back(wrap(std::make_shared<Conv2dNormActivation>(
      last_in, last, ConvNormOptions{.kernel = 1, .act = Act::silu})));

  register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  classifier_ = register_module("classifier", std::make_shared<nn::Sequential>());
  classifier_->push_back(std::make_shared<nn::Dropout>(cfg.dropout));
  classifier_->push_back(std::make_shared<nn::Linear>(last, cfg.num_classes));
  init_weights(*this, LinearInit::uniform_fan_out);
  checkpoint_ = cfg.checkpoint;
}

Tensor EfficientNetB0::forward(const Tensor& x) {
  FRUGAL_CHECK(x.ndim() == 4, "EfficientNetB0: expected input [N, H, W, C], got ", describe(x));
  Tensor h = checkpoint_.run_features(*features_, x);  // [N, H/32, W/32, 1280]
  h = nn::functional::global_avg_pool(h);              // [N, 1, 1, 1280]
  return (*classifier_)(h.flatten(1));
}

}  // namespace frugal::models
