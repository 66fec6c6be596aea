// Arithmetic ops with broadcasting and their backward. Mixed dtypes promote to the wider one
// (the "promote" autocast policy), except that a 0-d operand does not widen one with dims
// (detail::result_dtype, PyTorch's result type); gradients return in each input's own dtype.
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"

namespace frugal {
namespace {

using kernels::BinaryOp;

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
  }
  return "?";
}

Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  detail::check_same_device(name, {&a, &b});
  detail::check_floating(name, a);
  detail::check_floating(name, b);
  DType dt = detail::result_dtype(a, b);
  Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor ac = detail::cast_raw(a, dt), bc = detail::cast_raw(b, dt);
  Tensor out = Tensor::empty(out_shape, {dt, a.device()});
  if (a.device().is_meta()) return out;
  // Note [Residual sums of deferred batch norms] (nn/batch_norm_deferred.h): an operand still
  // owed its write (bn(z)) sums with the other in the write's own pass, never written itself.
  if (op == BinaryOp::add && a.shape() == b.shape() && a.dtype() == b.dtype() &&
      (b.write_sum_of_deferred(a, out.data_ptr()) || a.write_sum_of_deferred(b, out.data_ptr()))) {
    return out;
  }
  kernels::binary(detail::ctx_of(a), op, dt,
                  kernels::make_broadcast(out_shape, ac.shape(), bc.shape()), ac.data_ptr(),
                  bc.data_ptr(), out.data_ptr());
  return out;
}

Tensor affine_raw(const Tensor& a, double alpha, double beta) {
  detail::check_floating("affine", a);
  Tensor out = Tensor::empty(a.shape(), a.options());
  if (a.device().is_meta()) return out;
  kernels::affine(detail::ctx_of(a), a.dtype(), a.numel(), a.data_ptr(), alpha, beta,
                  out.data_ptr());
  return out;
}

// Gradient of an input of shape/dtype like `like` from a gradient of the broadcast shape.
Tensor reduce_grad(const Tensor& g, const Shape& shape, DType dtype) {
  return detail::cast_raw(detail::sum_to_raw(g, shape), dtype);
}

// Note [Recomputed residual sums]: out = a op b gets a recipe when every full-size input can be
// recomputed itself (broadcast operands, such as squeeze-excitation scales, are small and kept).
// A residual add of a block input and a batch-norm output then costs no saved bytes: the next
// conv that saves it keeps only the recipe, and backward recomputes the sum.
void recipe_if_inputs_recomputable(BinaryOp op, const Tensor& out, const Tensor& a,
                                   const Tensor& b) {
  if (!autograd::any_requires_grad({a, b})) return;
  bool any = false;
  for (const Tensor* t : {&a, &b}) {
    bool full = t->numel() == out.numel();
    if (full && !autograd::has_recipe(*t)) return;
    any = any || full;
  }
  if (!any) return;
  autograd::set_recipe(out, op_name(op), {a, b}, [op](const std::vector<Tensor>& in) {
    return binary_raw(op, in[0], in[1]);
  });
}

Tensor affine(const char* name, const Tensor& a, double alpha, double beta) {
  memory::OpScope op_scope(name);  // Note [Allocation events]
  detail::check_defined(name, {&a});
  Tensor out = affine_raw(a, alpha, beta);
  return autograd::record(name, {a}, out, [alpha](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{affine_raw(g[0], alpha, 0.0)};
  });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  memory::OpScope op_scope("add");  // Note [Allocation events]
  Tensor out = binary_raw(BinaryOp::add, a, b);
  recipe_if_inputs_recomputable(BinaryOp::add, out, a, b);
  return autograd::record("add", {a, b}, out,
                          [sa = a.shape(), sb = b.shape(), da = a.dtype(),
                           db = b.dtype()](const std::vector<Tensor>& g) -> std::vector<Tensor> {
                            return {reduce_grad(g[0], sa, da), reduce_grad(g[0], sb, db)};
                          });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  memory::OpScope op_scope("sub");  // Note [Allocation events]
  Tensor out = binary_raw(BinaryOp::sub, a, b);
  return autograd::record(
      "sub", {a, b}, out,
      [sa = a.shape(), sb = b.shape(), da = a.dtype(),
       db = b.dtype()](const std::vector<Tensor>& g) -> std::vector<Tensor> {
        return {reduce_grad(g[0], sa, da), reduce_grad(affine_raw(g[0], -1.0, 0.0), sb, db)};
      });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  memory::OpScope op_scope("mul");  // Note [Allocation events]
  Tensor out = binary_raw(BinaryOp::mul, a, b);
  recipe_if_inputs_recomputable(BinaryOp::mul, out, a, b);
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  // Save only what the other input's gradient needs (STYLE 5: save the minimum).
  return autograd::record(
      "mul", {a, b}, out, {need_b ? a : Tensor(), need_a ? b : Tensor()},
      [sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype()](
          const std::vector<Tensor>& g, const std::vector<Tensor>& saved) -> std::vector<Tensor> {
        const Tensor &a_saved = saved[0], &b_saved = saved[1];
        Tensor ga, gb;
        if (b_saved.defined()) ga = reduce_grad(binary_raw(BinaryOp::mul, g[0], b_saved), sa, da);
        if (a_saved.defined()) gb = reduce_grad(binary_raw(BinaryOp::mul, g[0], a_saved), sb, db);
        return {ga, gb};
      });
}

Tensor div(const Tensor& a, const Tensor& b) {
  memory::OpScope op_scope("div");  // Note [Allocation events]
  Tensor out = binary_raw(BinaryOp::div, a, b);
  bool need_b = b.requires_grad();
  return autograd::record(
      "div", {a, b}, out, {b, need_b ? out : Tensor()},
      [sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype()](
          const std::vector<Tensor>& g, const std::vector<Tensor>& saved) -> std::vector<Tensor> {
        const Tensor &b_saved = saved[0], &out_saved = saved[1];
        Tensor g_over_b = binary_raw(BinaryOp::div, g[0], b_saved);
        Tensor gb;
        if (out_saved.defined()) {  // d(a/b)/db = -(a/b)/b
          gb = reduce_grad(affine_raw(binary_raw(BinaryOp::mul, g_over_b, out_saved), -1.0, 0.0),
                           sb, db);
        }
        return {reduce_grad(g_over_b, sa, da), gb};
      });
}

Tensor add(const Tensor& a, double s) { return affine("add_scalar", a, 1.0, s); }
Tensor sub(const Tensor& a, double s) { return affine("sub_scalar", a, 1.0, -s); }
Tensor mul(const Tensor& a, double s) { return affine("mul_scalar", a, s, 0.0); }
Tensor div(const Tensor& a, double s) { return affine("div_scalar", a, 1.0 / s, 0.0); }
Tensor rsub(const Tensor& a, double s) { return affine("rsub_scalar", a, -1.0, s); }
Tensor neg(const Tensor& a) { return affine("neg", a, -1.0, 0.0); }

}  // namespace frugal
