// Elementwise math ops (abs, exp, log, sqrt, rsqrt, sigmoid, tanh, pow, clamp, maximum, minimum)
// and their backward, on kernels/math.h. Unary ops keep the input or the output for backward,
// whichever the derivative reads (kernels::unary_grad_from_output); binary ops broadcast and
// promote mixed dtypes like add and mul (detail::result_dtype), and return each gradient in its
// input's dtype.
#include <cmath>
#include <limits>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/math.h"
#include "memory/events.h"

namespace frugal {
namespace {

using kernels::MathOp;
using kernels::UnaryOp;

Tensor unary_raw(UnaryOp op, const Tensor& a, double p0, double p1) {
  Tensor out = Tensor::empty(a.shape(), a.options());
  if (a.device().is_meta()) return out;
  kernels::unary(detail::ctx_of(a), op, a.dtype(), a.numel(), a.data_ptr(), p0, p1, out.data_ptr());
  return out;
}

// The one entry of every unary op: autocast (f32 policy for the ops PyTorch runs in f32), checks,
// forward, and a node that saves x or y.
Tensor unary_op(const char* name, UnaryOp op, const Tensor& a_in, double p0 = 0, double p1 = 0,
                AutocastOp ac_op = AutocastOp::kCount) {
  memory::OpScope op_scope(name);  // Note [Allocation events]
  detail::check_defined(name, {&a_in});
  const Tensor a = ac_op == AutocastOp::kCount ? a_in : autocast::apply(ac_op, a_in);
  detail::check_floating(name, a);
  Tensor out = unary_raw(op, a, p0, p1);
  if (!autograd::any_requires_grad({a})) return out;
  const bool from_out = kernels::unary_grad_from_output(op);
  return autograd::record(
      name, {a}, out, {from_out ? out : a},
      [op, p0, p1](const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
        const Tensor& s = saved[0];
        Tensor gy = detail::cast_raw(g[0], s.dtype());
        Tensor dx = Tensor::empty(s.shape(), s.options());
        kernels::unary_backward(detail::ctx_of(s), op, s.dtype(), s.numel(), s.data_ptr(),
                                gy.data_ptr(), p0, p1, dx.data_ptr());
        return std::vector<Tensor>{dx};
      });
}

Tensor reduce_grad(const Tensor& g, const Shape& shape, DType dtype) {
  return detail::cast_raw(detail::sum_to_raw(g, shape), dtype);
}

Tensor binary_op(MathOp op, const char* name, const Tensor& a_in, const Tensor& b_in,
                 AutocastOp ac_op) {
  memory::OpScope op_scope(name);  // Note [Allocation events]
  detail::check_defined(name, {&a_in, &b_in});
  const Tensor a = autocast::apply(ac_op, a_in), b = autocast::apply(ac_op, b_in);
  Tensor out = detail::binary_math_raw(op, name, a, b);
  if (!autograd::any_requires_grad({a, b})) return out;
  const DType dt = out.dtype();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return autograd::record(
      name, {a, b}, out, {detail::cast_raw(a, dt), detail::cast_raw(b, dt)},
      [op, need_a, need_b, sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype()](
          const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
        const Tensor &ac = saved[0], &bc = saved[1];
        Tensor gy = detail::cast_raw(g[0], ac.dtype());
        Tensor ga = need_a ? Tensor::empty(gy.shape(), ac.options()) : Tensor();
        Tensor gb = need_b ? Tensor::empty(gy.shape(), ac.options()) : Tensor();
        kernels::binary_math_backward(detail::ctx_of(ac), op, ac.dtype(),
                                      kernels::make_broadcast(gy.shape(), ac.shape(), bc.shape()),
                                      ac.data_ptr(), bc.data_ptr(), gy.data_ptr(),
                                      need_a ? ga.data_ptr() : nullptr,
                                      need_b ? gb.data_ptr() : nullptr);
        return std::vector<Tensor>{need_a ? reduce_grad(ga, sa, da) : Tensor(),
                                   need_b ? reduce_grad(gb, sb, db) : Tensor()};
      });
}

}  // namespace

namespace detail {

Tensor binary_math_raw(MathOp op, const char* name, const Tensor& a, const Tensor& b) {
  check_same_device(name, {&a, &b});
  FRUGAL_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), name,
               ": expected floating tensors, got ", describe(a), " and ", describe(b));
  const DType dt = result_dtype(a, b);
  const Shape out_shape = broadcast_of(name, a, b);
  const Tensor ac = cast_raw(a, dt), bc = cast_raw(b, dt);
  Tensor out = Tensor::empty(out_shape, {kernels::is_comparison(op) ? DType::u8 : dt, a.device()});
  if (a.device().is_meta()) return out;
  kernels::binary_math(ctx_of(a), op, dt,
                       kernels::make_broadcast(out_shape, ac.shape(), bc.shape()), ac.data_ptr(),
                       bc.data_ptr(), out.data_ptr());
  return out;
}

}  // namespace detail

Tensor abs(const Tensor& a) { return unary_op("abs", UnaryOp::abs, a); }
Tensor exp(const Tensor& a) { return unary_op("exp", UnaryOp::exp, a, 0, 0, AutocastOp::exp); }
Tensor log(const Tensor& a) { return unary_op("log", UnaryOp::log, a, 0, 0, AutocastOp::log); }
Tensor sqrt(const Tensor& a) { return unary_op("sqrt", UnaryOp::sqrt, a); }
Tensor rsqrt(const Tensor& a) {
  return unary_op("rsqrt", UnaryOp::rsqrt, a, 0, 0, AutocastOp::rsqrt);
}
Tensor sigmoid(const Tensor& a) { return unary_op("sigmoid", UnaryOp::sigmoid, a); }
Tensor tanh(const Tensor& a) { return unary_op("tanh", UnaryOp::tanh, a); }
Tensor pow(const Tensor& a, double exponent) {
  return unary_op("pow", UnaryOp::pow, a, exponent, 0, AutocastOp::pow);
}

Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  FRUGAL_CHECK(lo.has_value() || hi.has_value(), "clamp: at least one of lo and hi is needed");
  constexpr double kInf = std::numeric_limits<double>::infinity();
  return unary_op("clamp", UnaryOp::clamp, a, lo.value_or(-kInf), hi.value_or(kInf));
}

Tensor pow(const Tensor& a, const Tensor& exponent) {
  return binary_op(MathOp::pow, "pow", a, exponent, AutocastOp::pow);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op(MathOp::maximum, "maximum", a, b, AutocastOp::maximum);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op(MathOp::minimum, "minimum", a, b, AutocastOp::minimum);
}

}  // namespace frugal
