// ResNet-18: BasicBlock stages [2, 2, 2, 2] at strides [1, 2, 2, 2], torchvision's init
// (kaiming fan_out convs, BN 1/0, nn.Linear's default for fc; no zero-init of the last BN).
#include "models/resnet.h"

#include "core/ops.h"

namespace frugal::models {

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  conv1_ = register_module("conv1",
                           std::make_shared<nn::Conv2d>(
                               in_channels, out_channels, 3,
                               nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false}));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out_channels));
  register_module("relu", std::make_shared<nn::ReLU>());
  conv2_ = register_module(
      "conv2", std::make_shared<nn::Conv2d>(out_channels, out_channels, 3,
                                            nn::Conv2dOptions{.padding = 1, .bias = false}));
  bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    downsample_ = register_module(
        "downsample",
        std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Conv2d>(in_channels, out_channels, 1,
                                         nn::Conv2dOptions{.stride = stride, .bias = false}),
            std::make_shared<nn::BatchNorm2d>(out_channels)}));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = bn1_->forward_with_activation((*conv1_)(x), nn::Activation::relu);
  h = (*bn2_)((*conv2_)(h));
  Tensor identity = downsample_ ? (*downsample_)(x) : x;
  return nn::functional::relu(h + identity);
}

ResNet18::ResNet18(const ModelConfig& cfg) {
  check_config("resnet18", cfg);
  auto wrap = cfg.checkpoint.block_wrapper();  // blocks in forward order
  auto ch = [&](int64_t c) { return make_divisible(static_cast<double>(c) * cfg.width); };
  int64_t in = ch(64);
  conv1_ = register_module(
      "conv1",
      std::make_shared<nn::Conv2d>(cfg.in_channels, in, 7,
                                   nn::Conv2dOptions{.stride = 2, .padding = 3, .bias = false}));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(in));
  register_module("relu", std::make_shared<nn::ReLU>());
  maxpool_ = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
  constexpr int64_t kWidths[] = {64, 128, 256, 512};
  for (int i = 0; i < 4; ++i) {
    const int64_t out = ch(kWidths[i]);
    layers_[i] =
        register_module("layer" + std::to_string(i + 1), std::make_shared<nn::Sequential>());
    layers_[i]->push_back(wrap(std::make_shared<BasicBlock>(in, out, i == 0 ? 1 : 2)));
    layers_[i]->push_back(wrap(std::make_shared<BasicBlock>(out, out, 1)));
    stages_.push_back(layers_[i]);
    in = out;
  }
  register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  fc_ = register_module("fc", std::make_shared<nn::Linear>(in, cfg.num_classes));
  init_weights(*this, LinearInit::pytorch_default);
  checkpoint_ = cfg.checkpoint;
}

Tensor ResNet18::forward(const Tensor& x) {
  FRUGAL_CHECK(x.ndim() == 4, "ResNet18: expected input [N, H, W, C], got ", describe(x));
  Tensor h = bn1_->forward_with_activation((*conv1_)(x), nn::Activation::relu);
  h = (*maxpool_)(h);                        // [N, H/4, W/4, 64]
  h = checkpoint_.run_features(stages_, h);  // [N, H/32, W/32, 512]
  h = nn::functional::global_avg_pool(h);    // [N, 1, 1, 512]
  return (*fc_)(h.flatten(1));
}

}  // namespace frugal::models
