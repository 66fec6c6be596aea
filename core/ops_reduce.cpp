// Reductions (sum, mean, sum_to) and matmul with their backward.
#include <algorithm>
#include <limits>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/reduce.h"

namespace frugal {
namespace {

// Shape with the reduced dims set to 1, and the number of elements folded into each output.
Shape keepdim_shape(const Shape& in, std::vector<int64_t>& dims, const char* op) {
  if (dims.empty()) {
    for (int64_t i = 0; i < in.ndim(); ++i) dims.push_back(i);
  }
  std::vector<int64_t> out = in.dims();
  for (int64_t& d : dims) {
    FRUGAL_CHECK(d >= -in.ndim() && d < in.ndim(), op, ": dim ", d, " out of range for shape ", in);
    d = in.dim(d);
    out[static_cast<size_t>(d)] = 1;
  }
  std::vector<int64_t> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  FRUGAL_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), op,
               ": a dim appears twice in ", Shape(sorted), " for shape ", in);  // PyTorch's too
  return Shape(out);
}

Tensor reduce(const char* op, AutocastOp ac_op, const Tensor& a_in, std::vector<int64_t> dims,
              bool keepdim, bool average) {
  memory::OpScope op_scope(op);  // Note [Allocation events]
  detail::check_defined(op, {&a_in});
  const Tensor a = autocast::apply(ac_op, a_in);  // f32 policy: 16-bit inputs reduce to f32
  FRUGAL_CHECK(is_floating(a.dtype()), op, ": expected a floating tensor, got ", describe(a),
               "; cast it first (a count of hits: ", op, "(cast(eq(pred, labels), DType::f32)))");
  Shape keep = keepdim_shape(a.shape(), dims, op);
  std::vector<int64_t> squeezed;
  for (int64_t i = 0; i < a.ndim(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) squeezed.push_back(a.shape()[i]);
  }
  Shape out_shape = keepdim ? keep : Shape(squeezed);
  int64_t count = keep.numel() == 0 ? 0 : a.numel() / std::max<int64_t>(keep.numel(), 1);
  double scale = average ? 1.0 / static_cast<double>(std::max<int64_t>(count, 1)) : 1.0;

  Tensor src = detail::cpu_half(a) ? detail::cast_raw(a, DType::f32) : a;
  Tensor out = Tensor::empty(keep, src.options());
  kernels::sum_to(detail::ctx_of(a), src.dtype(), kernels::make_reduction(a.shape(), keep),
                  src.data_ptr(), scale, out.data_ptr());
  if (average && count == 0 && keep.numel() > 0 && !out.device().is_meta()) {
    // The mean of nothing is 0 / 0, as in PyTorch: NaN, not the empty sum's 0.
    kernels::fill(detail::ctx_of(out), out.dtype(), out.numel(), out.data_ptr(),
                  std::numeric_limits<double>::quiet_NaN());
  }
  out = detail::cast_raw(out, a.dtype()).detach().reshape(out_shape);
  return autograd::record(op, {a}, out,
                          [keep, in_shape = a.shape(), scale](const std::vector<Tensor>& g) {
                            Tensor gk = g[0].reshape(keep);
                            if (scale != 1.0) gk = mul(gk, scale);
                            return std::vector<Tensor>{detail::expand_raw(gk, in_shape)};
                          });
}

Tensor gemm_raw(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  int64_t kb = tb ? b.size(1) : b.size(0), n = tb ? b.size(0) : b.size(1);
  FRUGAL_CHECK(k == kb, "matmul: inner dimensions differ: ", a.shape(), (ta ? "^T" : ""), " @ ",
               b.shape(), (tb ? "^T" : ""));
  if (detail::cpu_half(a)) {
    return detail::cast_raw(
        gemm_raw(detail::cast_raw(a, DType::f32), detail::cast_raw(b, DType::f32), ta, tb),
        a.dtype());
  }
  Tensor out = Tensor::empty(Shape{m, n}, a.options());
  kernels::gemm(detail::ctx_of(a), a.dtype(), ta, tb, m, n, k, a.data_ptr(), b.data_ptr(), 0.0,
                out.data_ptr());
  return out;
}

}  // namespace

Tensor sum(const Tensor& a, std::vector<int64_t> dims, bool keepdim) {
  return reduce("sum", AutocastOp::sum, a, std::move(dims), keepdim, false);
}

Tensor mean(const Tensor& a, std::vector<int64_t> dims, bool keepdim) {
  return reduce("mean", AutocastOp::mean, a, std::move(dims), keepdim, true);
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  memory::OpScope op_scope("sum_to");  // Note [Allocation events]
  detail::check_defined("sum_to", {&a});
  Tensor out = detail::sum_to_raw(a, shape);
  if (out.same(a)) return a;
  return autograd::record("sum_to", {a}, out, [in_shape = a.shape()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{detail::expand_raw(g[0], in_shape)};
  });
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool trans_b) {
  memory::OpScope op_scope("matmul");  // Note [Allocation events]
  detail::check_same_device("matmul", {&a_in, &b_in});
  const Tensor a = autocast::apply(AutocastOp::matmul, a_in);
  const Tensor b = autocast::apply(AutocastOp::matmul, b_in);
  FRUGAL_CHECK(a.ndim() == 2 && b.ndim() == 2, "matmul: expected 2-D tensors, got ", describe(a),
               " and ", describe(b));
  FRUGAL_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: ", describe(a), " and ",
               describe(b));
  detail::check_floating("matmul", a);
  Tensor out = gemm_raw(a, b, false, trans_b);
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return autograd::record(
      "matmul", {a, b}, out, {need_b ? a : Tensor(), need_a ? b : Tensor()},
      [trans_b, dtype = a.dtype()](const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
        const Tensor &a_saved = saved[0], &b_saved = saved[1];
        // The GEMMs read every operand as one dtype (Note [Gradient dtypes] in autograd.cpp).
        const Tensor gc = g[0].dtype() == dtype ? g[0] : detail::cast_raw(g[0], dtype);
        Tensor ga, gb;
        // out = a @ op(b): da = g @ op(b)^T; d op(b) = a^T @ g.
        if (b_saved.defined()) ga = gemm_raw(gc, b_saved, false, !trans_b);
        if (a_saved.defined()) {
          gb = trans_b ? gemm_raw(gc, a_saved, true, false) : gemm_raw(a_saved, gc, true, false);
        }
        return std::vector<Tensor>{ga, gb};
      });
}

Tensor argmax(const Tensor& a) {
  memory::OpScope op_scope("argmax");  // Note [Allocation events]
  FRUGAL_CHECK(a.ndim() == 2, "argmax: expected a [rows, cols] tensor, got ", describe(a));
  Tensor src = detail::cpu_half(a) ? detail::cast_raw(a, DType::f32) : a;
  Tensor out = Tensor::empty(Shape{a.size(0)}, {DType::i64, a.device()});
  kernels::argmax_rows(detail::ctx_of(a), src.dtype(), a.size(0), a.size(1), src.data_ptr(),
                       out.data<int64_t>());
  return out;
}

}  // namespace frugal
