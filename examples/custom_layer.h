// A user-defined differentiable op and layer, written outside frugal's sources: this is the
// extension path the README describes. hard_swish composed from ops (autograd's gradient);
// squared_relu(x) = relu(x)^2 with a hand-written backward;
// SquaredReLUScale multiplies it by a learnable per-channel scale.
#pragma once

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/construction_device.h"
#include "nn/functional.h"
#include "nn/module.h"

namespace custom {

using namespace frugal;

// Composed from differentiable ops: autograd gives the gradient, no backward to write.
inline Tensor hard_swish(const Tensor& x) {
  return x * clamp(x + 3.0, 0.0, 6.0) / 6.0;  // x * relu6(x + 3) / 6
}

// Forward runs on detached tensors (no history); autograd::record attaches one node with the
// tensors it saves (here relu(x) only) and its backward, which gets them back unpacked.
inline Tensor squared_relu(const Tensor& x) {
  Tensor r = nn::functional::relu(x.detach());
  Tensor y = mul(r, r);
  return autograd::record("squared_relu", {x}, y, /*saved=*/{r},
                          [](const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
                            // 2 relu(x) dy
                            return std::vector<Tensor>{mul(mul(g[0], saved[0]), 2.0)};
                          });
}

// A layer with one parameter, named "scale" ([C]), on NHWC activations.
class SquaredReLUScale : public nn::Module {
 public:
  explicit SquaredReLUScale(int64_t channels) {
    // On the construction device, as frugal's own layers (nn/construction_device.h): a model
    // built for frugal estimate or the planner's dry run then holds no bytes.
    scale = register_parameter("scale",
                               full(Shape{channels}, 0.5, {.device = nn::construction_device()}));
  }
  Tensor forward(const Tensor& x) override { return mul(squared_relu(x), scale); }
  std::string type_name() const override { return "SquaredReLUScale"; }
  Tensor scale;  // [C]
};

}  // namespace custom
