// Shared checks and raw (history-free) building blocks of the core ops.
#include "core/op_util.h"

#include <algorithm>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace frugal::detail {

void check_defined(const char* op, std::initializer_list<const Tensor*> ts) {
  int i = 0;
  for (const Tensor* t : ts) {
    FRUGAL_CHECK(t->defined(), op, ": argument ", i, " is an undefined tensor");
    ++i;
  }
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  check_defined(op, ts);
  const Tensor* first = *ts.begin();
  for (const Tensor* t : ts) {
    if (t->device() != first->device()) {
      std::string all;
      for (const Tensor* u : ts) all += (all.empty() ? "" : ", ") + describe(*u);
      FRUGAL_FAIL(op, ": expected all tensors on one device, got ", first->device(), " and ",
                  t->device(), " (", all, ")");
    }
  }
}

void check_floating(const char* op, const Tensor& t) {
  FRUGAL_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", describe(t));
}

DType result_dtype(const Tensor& a, const Tensor& b) {
  if (a.ndim() == 0 && b.ndim() > 0) return b.dtype();
  if (b.ndim() == 0 && a.ndim() > 0) return a.dtype();
  return promote(a.dtype(), b.dtype());
}

Shape broadcast_of(const char* op, const Tensor& a, const Tensor& b) {
  const Shape &sa = a.shape(), &sb = b.shape();
  for (int64_t i = 1; i <= std::min(sa.ndim(), sb.ndim()); ++i) {
    int64_t da = sa[sa.ndim() - i], db = sb[sb.ndim() - i];
    FRUGAL_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", sa, " and ", sb,
                 " cannot be broadcast (", describe(a), " and ", describe(b), ")");
  }
  return broadcast_shapes(sa, sb, op);
}

Tensor cast_raw(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), {dtype, t.device()});
  FRUGAL_CHECK(!(t.device().is_cuda() && (dtype == DType::f64 || t.dtype() == DType::f64)),
               "cast: f64 is CPU-only, cannot cast ", describe(t), " to ", dtype);
  kernels::cast(ctx_of(t), t.dtype(), dtype, t.numel(), t.data_ptr(), out.data_ptr());
  return out;
}

Tensor expand_raw(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Tensor out = Tensor::empty(shape, t.options());
  // out = t + 0 with t broadcast; the zero is a one-element tensor broadcast everywhere. Made on
  // meta too, so that a dry run allocates what the device does (Note [Planned steps]).
  Tensor zero = Tensor::empty(Shape{1}, t.options());
  kernels::Context ctx = ctx_of(t);
  kernels::fill(ctx, t.dtype(), 1, zero.data_ptr(), 0.0);
  kernels::binary(ctx, kernels::BinaryOp::add, t.dtype(),
                  kernels::make_broadcast(shape, t.shape(), zero.shape()), t.data_ptr(),
                  zero.data_ptr(), out.data_ptr());
  return out;
}

Tensor sum_to_raw(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  if (cpu_half(t)) return cast_raw(sum_to_raw(cast_raw(t, DType::f32), shape), t.dtype());
  // Right-align `shape` to t's rank with leading ones, reduce, then drop the leading ones.
  std::vector<int64_t> keep(static_cast<size_t>(t.ndim()), 1);
  int64_t offset = t.ndim() - shape.ndim();
  FRUGAL_CHECK(offset >= 0, "sum_to: cannot reduce ", t.shape(), " to ", shape);
  for (int64_t i = 0; i < shape.ndim(); ++i) keep[static_cast<size_t>(i + offset)] = shape[i];
  Shape keep_shape(keep);
  kernels::Reduction r = kernels::make_reduction(t.shape(), keep_shape);
  Tensor out = Tensor::empty(keep_shape, t.options());
  kernels::sum_to(ctx_of(t), t.dtype(), r, t.data_ptr(), 1.0, out.data_ptr());
  return out.detach().reshape(shape);
}

}  // namespace frugal::detail
