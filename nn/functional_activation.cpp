// Pointwise activations: one kernel family, the backward computed from the saved input.
#include "core/autograd.h"
#include "core/op_util.h"
#include "kernels/elementwise.h"
#include "nn/functional.h"

namespace frugal::nn::functional {
namespace {

using kernels::Activation;

constexpr const char* kActivationNames[] = {"relu", "relu6",   "hardswish",
                                            "silu", "sigmoid", "identity"};
static_assert(sizeof(kActivationNames) / sizeof(kActivationNames[0]) == kernels::kNumActivations,
              "every activation needs a name");

Tensor activation_raw(Activation act, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.options());
  kernels::activation_forward(detail::ctx_of(x), act, x.dtype(), x.numel(), x.data_ptr(),
                              y.data_ptr());
  return y;
}

Tensor activation_backward_raw(Activation act, const Tensor& x, const Tensor& g) {
  Tensor gc = detail::cast_raw(g, x.dtype());
  Tensor dx = Tensor::empty(x.shape(), x.options());
  kernels::activation_backward(detail::ctx_of(x), act, x.dtype(), x.numel(), x.data_ptr(),
                               gc.data_ptr(), dx.data_ptr());
  return dx;
}

// relu and relu6 pass the gradient exactly where their output is strictly between its bounds,
// which the output tells as well as the input: they save the output, which the next op (a conv)
// saves anyway, so the two share one stored tensor.
bool backward_from_output(Activation act) {
  return act == Activation::relu || act == Activation::relu6 || act == Activation::identity;
}

}  // namespace

Tensor activation(Activation act, const Tensor& x) {
  const char* name = kActivationNames[static_cast<int>(act)];
  memory::OpScope op_scope(name);  // Note [Allocation events]
  detail::check_defined(name, {&x});
  detail::check_floating(name, x);
  if (act == Activation::identity) return x;
  Tensor y = activation_raw(act, x);
  return autograd::record(
      name, {x}, y, {backward_from_output(act) ? y : x},
      [act](const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
        return std::vector<Tensor>{activation_backward_raw(act, saved[0], g[0])};
      });
}

Tensor relu(const Tensor& x) { return activation(Activation::relu, x); }
Tensor relu6(const Tensor& x) { return activation(Activation::relu6, x); }
Tensor hardswish(const Tensor& x) { return activation(Activation::hardswish, x); }
Tensor silu(const Tensor& x) { return activation(Activation::silu, x); }
Tensor sigmoid(const Tensor& x) { return activation(Activation::sigmoid, x); }

}  // namespace frugal::nn::functional
