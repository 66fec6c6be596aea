// Reusable pieces of the model zoo, with torchvision's names and semantics: channel rounding,
// Conv2dNormActivation, SqueezeExcitation, StochasticDepth and the weight initialisers.
//
//   auto stem = std::make_shared<Conv2dNormActivation>(3, 32, ConvNormOptions{.stride = 2});
//   // children "0" Conv2d (no bias), "1" BatchNorm2d, "2" ReLU6 -> "0.weight", "1.running_mean"
#pragma once

#include <cstdint>
#include <memory>

#include "core/factory.h"
#include "nn/layers.h"

namespace frugal::models {

// torchvision's _make_divisible: the nearest multiple of `divisor` (at least `min_value`,
// default `divisor`) that is not below 90% of v.
int64_t make_divisible(double v, int64_t divisor = 8, int64_t min_value = 0);

enum class Act { none, relu, relu6, silu };
// A fresh activation module (nullptr for Act::none).
std::shared_ptr<nn::Module> make_activation(Act act);

struct ConvNormOptions {
  int64_t kernel = 3;
  int64_t stride = 1;
  int64_t groups = 1;
  Act act = Act::relu6;
  double bn_eps = 1e-5;
  double bn_momentum = 0.1;
  bool recompute = false;  // the conv's output recomputed in backward (nn::Conv2dOptions)
};

// Conv2d(bias=False, padding=(k-1)/2) -> BatchNorm2d -> activation, children "0", "1", "2".
class Conv2dNormActivation : public nn::Sequential {
 public:
  Conv2dNormActivation(int64_t in_channels, int64_t out_channels, ConvNormOptions opt = {});
  std::string type_name() const override { return "Conv2dNormActivation"; }
};

// x * sigmoid(fc2(act(fc1(avgpool(x))))), fc1/fc2 are 1x1 convs with bias.
// Children in torchvision's order: avgpool, fc1, fc2, activation, scale_activation.
class SqueezeExcitation : public nn::Module {
 public:
  SqueezeExcitation(int64_t channels, int64_t squeeze_channels, Act act = Act::relu);
  Tensor forward(const Tensor& x) override;  // [N, H, W, C] -> [N, H, W, C]
  std::string type_name() const override { return "SqueezeExcitation"; }

 private:
  std::shared_ptr<nn::Conv2d> fc1_, fc2_;  // [S, 1, 1, C], [C, 1, 1, S]
  std::shared_ptr<nn::Module> act_;
};

// torchvision.ops.StochasticDepth(p, "row"): in training each sample of the batch is kept with
// probability 1 - p and scaled by 1 / (1 - p), else zeroed; identity in eval or when p == 0.
// The per-sample keep draw is U(seed, offset + i) >= p from the generator (kernels/random.h),
// the same rule as dropout. The [N, 1, 1, 1] mask is drawn on the host, and on CUDA by the dropout
// kernel from the generator's draw(), so a captured CUDA graph draws a new one at every replay.
class StochasticDepth : public nn::Module {
 public:
  explicit StochasticDepth(double p, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "StochasticDepth"; }
  double p() const { return p_; }

 protected:
  std::string extra_repr() const override;

 private:
  double p_;
  Generator* gen_;
};

// How a model's Linear layers are initialised (torchvision differs per family).
enum class LinearInit {
  pytorch_default,  // nn.Linear's own (ResNet)
  normal_001,       // N(0, 0.01), bias 0 (MobileNetV2)
  uniform_fan_out,  // U(-1/sqrt(out), 1/sqrt(out)), bias 0 (EfficientNet)
};
// torchvision's model init over every submodule: Conv2d kaiming_normal_(fan_out) with zero
// bias, BatchNorm2d weight 1 / bias 0, Linear as `linear`.
void init_weights(nn::Module& root, LinearInit linear);

}  // namespace frugal::models
