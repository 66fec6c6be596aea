// Layers with parameters: construction with PyTorch's default initialisation, and forward.
#include "nn/layers.h"

#include "core/autograd.h"
#include "core/factory.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"
#include "nn/construction_device.h"
#include "nn/init.h"

namespace frugal::nn {
namespace {

// f32 parameters and buffers on the construction device (nn/construction_device.h).
TensorOptions on() { return {.device = construction_device()}; }

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions opt)
    : in_(in_channels), out_(out_channels), k_(kernel_size), opt_(opt) {
  FRUGAL_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && opt.groups > 0 &&
                   in_channels % opt.groups == 0 && out_channels % opt.groups == 0,
               "Conv2d: bad configuration in=", in_channels, " out=", out_channels,
               " kernel=", kernel_size, " groups=", opt.groups);
  int64_t cin_g = in_channels / opt.groups;
  weight = register_parameter("weight",
                              zeros(Shape{out_channels, kernel_size, kernel_size, cin_g}, on()));
  int64_t fan_in = cin_g * kernel_size * kernel_size;
  init::default_uniform_(weight, fan_in);
  if (opt.bias) {
    bias = register_parameter("bias", zeros(Shape{out_channels}, on()));
    init::default_uniform_(bias, fan_in);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  return functional::conv2d(
      x, weight, bias,
      {opt_.stride, opt_.padding, opt_.dilation, opt_.groups, opt_.recompute_output});
}

std::string Conv2d::extra_repr() const {
  return detail::str(in_, ", ", out_, ", kernel_size=", k_, ", stride=", opt_.stride,
                     opt_.padding ? detail::str(", padding=", opt_.padding) : "",
                     opt_.dilation != 1 ? detail::str(", dilation=", opt_.dilation) : "",
                     opt_.groups != 1 ? detail::str(", groups=", opt_.groups) : "",
                     opt_.bias ? "" : ", bias=False");
}

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias) {
  FRUGAL_CHECK(in_features > 0 && out_features > 0, "Linear: bad sizes in=", in_features,
               " out=", out_features);
  weight = register_parameter("weight", zeros(Shape{out_features, in_features}, on()));
  init::default_uniform_(weight, in_features);
  if (has_bias) {
    bias = register_parameter("bias", zeros(Shape{out_features}, on()));
    init::default_uniform_(bias, in_features);
  }
}

Tensor Linear::forward(const Tensor& x) { return functional::linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return detail::str("in_features=", weight.size(1), ", out_features=", weight.size(0),
                     bias.defined() ? "" : ", bias=False");
}

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum)
    : c_(num_features), eps_(eps), momentum_(momentum) {
  FRUGAL_CHECK(num_features > 0, "BatchNorm2d: bad num_features ", num_features);
  weight = register_parameter("weight", ones(Shape{c_}, on()));
  bias = register_parameter("bias", zeros(Shape{c_}, on()));
  running_mean = register_buffer("running_mean", zeros(Shape{c_}, on()));
  running_var = register_buffer("running_var", ones(Shape{c_}, on()));
  num_batches_tracked =
      register_buffer("num_batches_tracked",
                      zeros(Shape{}, {.dtype = DType::i64, .device = construction_device()}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  return forward_with_activation(x, Activation::identity);
}

Tensor BatchNorm2d::forward_with_activation(const Tensor& x, Activation act) {
  // Counted once per step (not again when a checkpointed segment recomputes: Note
  // [Checkpointing]), on the device: no host read, and a captured graph counts on every replay.
  // batch_norm counts in its statistics kernel; the synchronized path counts here.
  if (is_training() && cross_replica_sum) {
    if (!autograd::recomputing()) {
      kernels::add_i64(detail::ctx_of(num_batches_tracked), 1, num_batches_tracked.data<int64_t>(),
                       1);
    }
    Tensor y = functional::sync_batch_norm(x, weight, bias, running_mean, running_var,
                                           cross_replica_sum, momentum_, eps_);
    return act == Activation::identity ? y : functional::activation(act, y);
  }
  return functional::batch_norm(x, weight, bias, running_mean, running_var,
                                {is_training(), momentum_, eps_, act}, num_batches_tracked);
}

Dropout::Dropout(double p) : p_(p) {
  FRUGAL_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability must be in [0, 1], got ", p);
}

std::string pool_repr(const functional::Pool2dOptions& o, bool average) {
  std::string s =
      detail::str("kernel_size=", o.kernel, ", stride=", o.stride == 0 ? o.kernel : o.stride,
                  ", padding=", o.padding);
  if (average) s += o.count_include_pad ? ", count_include_pad=True" : ", count_include_pad=False";
  return s;
}

std::string BatchNorm2d::extra_repr() const {
  return detail::str(c_, ", eps=", eps_, ", momentum=", momentum_);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t output_size) {
  FRUGAL_CHECK(output_size == 1, "AdaptiveAvgPool2d: only output_size=1 is supported, got ",
               output_size);
}

}  // namespace frugal::nn
