// The shared blocks: channel rounding, conv-norm-activation, squeeze-excitation, stochastic
// depth, and torchvision's initialisation walk.
#include "models/blocks.h"

#include <cmath>
#include <vector>

#include "base/error.h"
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/random.h"
#include "nn/init.h"

namespace frugal::models {

int64_t make_divisible(double v, int64_t divisor, int64_t min_value) {
  FRUGAL_CHECK(divisor > 0 && v > 0, "make_divisible: bad value ", v, " or divisor ", divisor);
  if (min_value <= 0) min_value = divisor;
  // int(v + divisor / 2) // divisor * divisor, as Python computes it for positive v.
  int64_t rounded = static_cast<int64_t>(v + static_cast<double>(divisor) / 2) / divisor * divisor;
  int64_t out = std::max(min_value, rounded);
  if (static_cast<double>(out) < 0.9 * v) out += divisor;  // never round down by more than 10%
  return out;
}

std::shared_ptr<nn::Module> make_activation(Act act) {
  switch (act) {
    case Act::none:
      return nullptr;
    case Act::relu:
      return std::make_shared<nn::ReLU>();
    case Act::relu6:
      return std::make_shared<nn::ReLU6>();
    case Act::silu:
      return std::make_shared<nn::SiLU>();
  }
  FRUGAL_FAIL("make_activation: unknown activation ", static_cast<int>(act));
}

Conv2dNormActivation::Conv2dNormActivation(int64_t in_channels, int64_t out_channels,
                                           ConvNormOptions opt) {
  FRUGAL_CHECK(opt.kernel % 2 == 1, "Conv2dNormActivation: odd kernel expected, got ", opt.kernel);
  push_back(std::make_shared<nn::Conv2d>(in_channels, out_channels, opt.kernel,
                                         nn::Conv2dOptions{.stride = opt.stride,
                                                           .padding = (opt.kernel - 1) / 2,
                                                           .groups = opt.groups,
                                                           .bias = false,
                                                           .recompute_output = opt.recompute}));
  push_back(std::make_shared<nn::BatchNorm2d>(out_channels, opt.bn_eps, opt.bn_momentum));
  if (auto a = make_activation(opt.act)) push_back(a);
}

SqueezeExcitation::SqueezeExcitation(int64_t channels, int64_t squeeze_channels, Act act) {
  register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  fc1_ = register_module("fc1", std::make_shared<nn::Conv2d>(channels, squeeze_channels, 1));
  fc2_ = register_module("fc2", std::make_shared<nn::Conv2d>(squeeze_channels, channels, 1));
  FRUGAL_CHECK(act != Act::none, "SqueezeExcitation: an activation is required");
  act_ = register_module("activation", make_activation(act));
  register_module("scale_activation", std::make_shared<nn::Sigmoid>());
}

Tensor SqueezeExcitation::forward(const Tensor& x) {
  Tensor s = nn::functional::global_avg_pool(x);  // [N, 1, 1, C]
  s = nn::functional::sigmoid((*fc2_)((*act_)((*fc1_)(s))));
  return s * x;  // broadcast over H, W
}

StochasticDepth::StochasticDepth(double p, Generator& gen) : p_(p), gen_(&gen) {
  FRUGAL_CHECK(p >= 0 && p <= 1, "StochasticDepth: probability must be in [0, 1], got ", p);
}

Tensor StochasticDepth::forward(const Tensor& x) {
  if (!is_training() || p_ == 0.0) return x;
  FRUGAL_CHECK(x.ndim() >= 1, "StochasticDepth: expected a batch dimension, got ", describe(x));
  const int64_t n = x.size(0);
  std::vector<int64_t> dims(static_cast<size_t>(x.ndim()), 1);
  dims[0] = n;
  if (p_ == 1.0) return x * 0.0;
  if (x.device().is_cuda()) {
    // The row mask drawn on the device by the dropout kernel, in place over ones, from the
    // generator's draw(): a captured graph replays it with a new offset each time (Note [Random
    // draws in captured graphs]). One allocation, as on the host path below.
    Tensor mask = ones(Shape(dims), {x.dtype(), x.device()});  // [N, 1, 1, 1]
    const Generator::Draw draw = gen_->draw(static_cast<uint64_t>(n));
    kernels::dropout_forward(detail::ctx_of(mask), mask.dtype(), n, mask.data_ptr(), p_, draw.seed,
                             draw.offset, draw.offset_base, mask.data_ptr(), nullptr);
    return x * mask;
  }
  // Reserved even on meta, so a dry run advances the generator like a real step.
  const uint64_t offset = gen_->take(static_cast<uint64_t>(n));
  const double keep = 1.0 - p_;
  std::vector<double> mask(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    bool kept = kernels::uniform01(gen_->seed(), offset + static_cast<uint64_t>(i)) >= p_;
    mask[static_cast<size_t>(i)] = kept ? 1.0 / keep : 0.0;  // kept implies keep > 0
  }
  Tensor m = from_vector(mask, Shape(dims), {x.dtype(), x.device()});  // [N, 1, 1, 1]
  return x * m;
}

std::string StochasticDepth::extra_repr() const { return detail::str("p=", p_, ", mode=row"); }

namespace {

void init_module(nn::Module& m, LinearInit linear) {
  if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) {
    const Tensor& w = conv->weight;  // [K, kh, kw, C/groups]: fan_out as torch, K * kh * kw
    nn::init::kaiming_normal_fan_out_(w, w.size(0) * w.size(1) * w.size(2));
    if (conv->bias.defined()) nn::init::constant_(conv->bias, 0.0);
  } else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) {
    nn::init::constant_(bn->weight, 1.0);
    nn::init::constant_(bn->bias, 0.0);
  } else if (auto* fc = dynamic_cast<nn::Linear*>(&m)) {
    switch (linear) {
      case LinearInit::pytorch_default:
        break;  // the constructor already drew it
      case LinearInit::normal_001:
        nn::init::normal_(fc->weight, 0.0, 0.01);
        break;
      case LinearInit::uniform_fan_out: {
        double r = 1.0 / std::sqrt(static_cast<double>(fc->weight.size(0)));
        nn::init::uniform_(fc->weight, -r, r);
        break;
      }
    }
    if (linear != LinearInit::pytorch_default && fc->bias.defined()) {
      nn::init::constant_(fc->bias, 0.0);
    }
  }
  for (auto& [name, child] : m.named_children()) init_module(*child, linear);
}

}  // namespace

void init_weights(nn::Module& root, LinearInit linear) {
  autograd::NoGradGuard no_grad;
  init_module(root, linear);
}

}  // namespace frugal::models
