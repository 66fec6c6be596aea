// Comparisons (eq, ne, lt, le, gt, ge: u8 0/1, no gradient) and where(cond, a, b), whose
// gradient goes to a where cond is set and to b elsewhere. Tensor-scalar comparisons round the
// scalar to the tensor's dtype first, as PyTorch does with a Python number.
//
// Note [Integer comparisons]
// i64 and u8 tensors compare exactly with one of their own dtype, and with a number: accuracy
// is eq(argmax(logits, 1), labels), as in PyTorch. PyTorch compares an integer tensor with a
// fraction in float, which rounds i64 values past 2^24; here the fraction becomes the integer
// comparison it equals, the same answers without the rounding. An integer tensor against a
// float tensor, or i64 against u8, is refused naming both, where PyTorch promotes: cast the
// integer one (or both) to a float dtype first, which both devices do.
#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/math.h"
#include "memory/events.h"

namespace frugal {
namespace {

using kernels::MathOp;

Tensor compare(MathOp op, const char* name, const Tensor& a, const Tensor& b) {
  memory::OpScope op_scope(name);  // Note [Allocation events]
  detail::check_defined(name, {&a, &b});
  if (is_floating(a.dtype()) && is_floating(b.dtype())) {
    return detail::binary_math_raw(op, name, a, b);
  }
  // Note [Integer comparisons]
  FRUGAL_CHECK(a.dtype() == b.dtype(), name, ": compares integer tensors of one dtype, got ",
               describe(a), " and ", describe(b), "; cast one of them first");
  detail::check_same_device(name, {&a, &b});
  const Shape shape = detail::broadcast_of(name, a, b);
  Tensor out = Tensor::empty(shape, {DType::u8, a.device()});
  if (a.device().is_meta()) return out;
  kernels::binary_math(detail::ctx_of(a), op, a.dtype(),
                       kernels::make_broadcast(shape, a.shape(), b.shape()), a.data_ptr(),
                       b.data_ptr(), out.data_ptr());
  return out;
}

// An integer tensor against a number, exactly (Note [Integer comparisons]): a fraction becomes
// the integer comparison it equals (x < 2.5 is x < 3, x <= 2.5 is x <= 2), and a number outside
// the dtype's range or NaN gives the same answer for every element.
Tensor compare_integer(MathOp op, const char* name, const Tensor& a, double s) {
  auto every = [&](bool value) {
    return full(a.shape(), value ? 1.0 : 0.0, {.dtype = DType::u8, .device = a.device()});
  };
  if (std::isnan(s)) return every(op == MathOp::ne);
  if (s != std::floor(s)) {
    if (op == MathOp::eq || op == MathOp::ne) return every(op == MathOp::ne);
    s = (op == MathOp::lt || op == MathOp::ge) ? std::ceil(s) : std::floor(s);
  }
  const bool u8 = a.dtype() == DType::u8;
  const double lowest = u8 ? 0.0 : -0x1p63;
  if (s < lowest) return every(op == MathOp::ne || op == MathOp::gt || op == MathOp::ge);
  if (u8 ? s > 255.0 : s >= 0x1p63) {
    return every(op == MathOp::ne || op == MathOp::lt || op == MathOp::le);
  }
  Tensor sb = full({}, s, {.dtype = a.dtype(), .device = a.device()});  // 0-d: a's shape stays
  return compare(op, name, a, sb);
}

Tensor compare(MathOp op, const char* name, const Tensor& a, double s) {
  memory::OpScope op_scope(name);  // Note [Allocation events]
  detail::check_defined(name, {&a});
  if (!is_floating(a.dtype())) return compare_integer(op, name, a, s);
  detail::check_floating(name, a);
  Tensor sb = Tensor::empty(Shape{}, a.options());  // 0-d: a 0-d a gives a 0-d result
  kernels::fill(detail::ctx_of(a), a.dtype(), 1, sb.data_ptr(), s);
  return detail::binary_math_raw(op, name, a, sb);
}

// out = cond ? a : b with all three already of out's shape; a or b undefined reads zero.
Tensor where_raw(const Tensor& cond, const Tensor& a, const Tensor& b, const TensorOptions& opts) {
  Tensor out = Tensor::empty(cond.shape(), opts);
  kernels::where(detail::ctx_of(cond), dtype_size(opts.dtype), cond.numel(), cond.data<uint8_t>(),
                 a.defined() ? a.data_ptr() : nullptr, b.defined() ? b.data_ptr() : nullptr,
                 out.data_ptr());
  return out;
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare(MathOp::eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(MathOp::ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(MathOp::lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(MathOp::le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(MathOp::gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(MathOp::ge, "ge", a, b); }
Tensor eq(const Tensor& a, double s) { return compare(MathOp::eq, "eq", a, s); }
Tensor ne(const Tensor& a, double s) { return compare(MathOp::ne, "ne", a, s); }
Tensor lt(const Tensor& a, double s) { return compare(MathOp::lt, "lt", a, s); }
Tensor le(const Tensor& a, double s) { return compare(MathOp::le, "le", a, s); }
Tensor gt(const Tensor& a, double s) { return compare(MathOp::gt, "gt", a, s); }
Tensor ge(const Tensor& a, double s) { return compare(MathOp::ge, "ge", a, s); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  memory::OpScope op_scope("where");  // Note [Allocation events]
  detail::check_same_device("where", {&cond, &a, &b});
  FRUGAL_CHECK(cond.dtype() == DType::u8, "where: the condition must be u8, got ", describe(cond));
  FRUGAL_CHECK(a.dtype() == b.dtype() || (is_floating(a.dtype()) && is_floating(b.dtype())),
               "where: dtypes of ", describe(a), " and ", describe(b), " do not promote");
  const DType dt = detail::result_dtype(a, b);  // equal dtypes, integers too, stay as they are
  const Shape ab = detail::broadcast_of("where", a, b);
  const Shape shape = broadcast_shapes(cond.shape(), ab, "where (condition)");
  Tensor c = detail::expand_copy_raw(cond, shape);
  Tensor out = where_raw(c, detail::expand_copy_raw(detail::cast_raw(a, dt), shape),
                         detail::expand_copy_raw(detail::cast_raw(b, dt), shape), {dt, a.device()});
  if (!is_floating(dt) || !autograd::any_requires_grad({a, b})) return out;
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return autograd::record(
      "where", {a, b}, out, {cond},
      [need_a, need_b, shape, sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype()](
          const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
        Tensor c = detail::expand_copy_raw(saved[0], shape);
        TensorOptions opts = g[0].options();
        Tensor ga, gb;
        if (need_a) ga = where_raw(c, g[0], Tensor(), opts);
        if (need_b) gb = where_raw(c, Tensor(), g[0], opts);
        auto reduce = [](const Tensor& t, const Shape& s, DType d) {
          return t.defined() ? detail::cast_raw(detail::sum_to_raw(t, s), d) : Tensor();
        };
        return std::vector<Tensor>{reduce(ga, sa, da), reduce(gb, sb, db)};
      });
}

}  // namespace frugal
