// Ops along dimensions, on kernels/dim_reduce.h: softmax and log_softmax (max-subtracted, f32
// inside the kernel for 16-bit data, f32 policy under autocast like PyTorch), amax over any dims
// (gradient split evenly between tied maxima, like PyTorch) and argmax over one dim (first
// maximum; not differentiable).
#include <algorithm>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/dim_reduce.h"
#include "memory/events.h"

namespace frugal {
namespace {

using kernels::DimOp;
using kernels::DimView;

// [outer, size, inner] for the dims [first, last] of shape.
DimView view_of(const Shape& shape, int64_t first, int64_t last) {
  DimView v;
  for (int64_t i = 0; i < shape.ndim(); ++i) {
    (i < first ? v.outer : i > last ? v.inner : v.size) *= shape[i];
  }
  return v;
}

Tensor softmax_op(const char* name, DimOp op, AutocastOp ac_op, const Tensor& a_in, int64_t dim) {
  memory::OpScope op_scope(name);  // Note [Allocation events]
  detail::check_defined(name, {&a_in});
  const Tensor a = autocast::apply(ac_op, a_in);
  detail::check_floating(name, a);
  const int64_t d = detail::wrap_dim(name, dim, a.shape());
  const DimView v = view_of(a.shape(), d, d);
  Tensor out = Tensor::empty(a.shape(), a.options());
  kernels::dim_reduce(detail::ctx_of(a), op, a.dtype(), v, a.data_ptr(), out.data_ptr());
  return autograd::record(name, {a}, out, {out},
                          [op, v](const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
                            const Tensor& y = saved[0];
                            Tensor gy = detail::cast_raw(g[0], y.dtype());
                            Tensor dx = Tensor::empty(y.shape(), y.options());
                            kernels::dim_reduce_backward(detail::ctx_of(y), op, y.dtype(), v,
                                                         nullptr, y.data_ptr(), gy.data_ptr(),
                                                         dx.data_ptr());
                            return std::vector<Tensor>{dx};
                          });
}

// Sorted, wrapped, distinct dims (all when empty).
std::vector<int64_t> reduced_dims(const char* op, const Shape& shape, std::vector<int64_t> dims) {
  if (dims.empty()) {
    for (int64_t i = 0; i < shape.ndim(); ++i) dims.push_back(i);
  }
  for (int64_t& d : dims) d = detail::wrap_dim(op, d, shape);
  std::sort(dims.begin(), dims.end());
  FRUGAL_CHECK(std::adjacent_find(dims.begin(), dims.end()) == dims.end(), op,
               ": a dim appears twice in ", Shape(dims), " for shape ", shape);
  return dims;
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) {
  return softmax_op("softmax", DimOp::softmax, AutocastOp::softmax, a, dim);
}

Tensor log_softmax(const Tensor& a, int64_t dim) {
  return softmax_op("log_softmax", DimOp::log_softmax, AutocastOp::log_softmax, a, dim);
}

Tensor amax(const Tensor& a, std::vector<int64_t> dims_in, bool keepdim) {
  memory::OpScope op_scope("amax");  // Note [Allocation events]
  detail::check_defined("amax", {&a});
  detail::check_floating("amax", a);
  const std::vector<int64_t> dims = reduced_dims("amax", a.shape(), std::move(dims_in));
  std::vector<int64_t> keep = a.shape().dims(), squeezed, perm, kept_perm;
  for (int64_t i = 0; i < a.ndim(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) != dims.end()) {
      FRUGAL_CHECK(a.shape()[i] > 0, "amax: cannot reduce the empty dim ", i, " of ", describe(a));
      keep[static_cast<size_t>(i)] = 1;
    } else {
      squeezed.push_back(a.shape()[i]);
      kept_perm.push_back(i);
    }
  }
  // Reduced dims that are one block are read in place; others are moved to the end first.
  const bool block =
      dims.empty() || dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
  perm = kept_perm;
  perm.insert(perm.end(), dims.begin(), dims.end());
  DimView v;
  if (block && !dims.empty()) {
    v = view_of(a.shape(), dims.front(), dims.back());
  } else {
    v.outer = Shape(squeezed).numel();
    v.size = a.numel() / std::max<int64_t>(v.outer, 1);
  }
  if (dims.empty()) v = DimView{1, 1, a.numel()};  // a 0-d tensor: the value itself
  Tensor src = block ? a : detail::permute_raw(a, perm);
  Tensor out = Tensor::empty(Shape(keep), a.options());
  if (v.outer * v.inner > 0) {
    kernels::dim_reduce(detail::ctx_of(a), DimOp::amax, a.dtype(), v, src.data_ptr(),
                        out.data_ptr());
  }
  out = out.reshape(keepdim ? Shape(keep) : Shape(squeezed));
  if (!autograd::any_requires_grad({a})) return out;
  return autograd::record(
      "amax", {a}, out, {a, out},
      [v, block, perm, keep](const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
        const Tensor& x = saved[0];
        Tensor xs = block ? x : detail::permute_raw(x, perm);
        Tensor gy = detail::cast_raw(g[0], x.dtype());
        Tensor dx = Tensor::empty(xs.shape(), x.options());
        if (x.numel() > 0) {
          kernels::dim_reduce_backward(detail::ctx_of(x), DimOp::amax, x.dtype(), v, xs.data_ptr(),
                                       saved[1].data_ptr(), gy.data_ptr(), dx.data_ptr());
        }
        if (block) return std::vector<Tensor>{dx};
        std::vector<int64_t> inverse(perm.size());
        for (size_t i = 0; i < perm.size(); ++i)
          inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
        return std::vector<Tensor>{detail::permute_raw(dx, inverse)};
      });
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  memory::OpScope op_scope("argmax");  // Note [Allocation events]
  detail::check_defined("argmax", {&a});
  detail::check_floating("argmax", a);
  const int64_t d = detail::wrap_dim("argmax", dim, a.shape());
  FRUGAL_CHECK(a.shape()[d] > 0, "argmax: cannot reduce the empty dim ", dim, " of ", describe(a));
  std::vector<int64_t> dims = a.shape().dims();
  if (keepdim) {
    dims[static_cast<size_t>(d)] = 1;
  } else {
    dims.erase(dims.begin() + d);
  }
  Tensor out = Tensor::empty(Shape(dims), {DType::i64, a.device()});
  if (out.numel() > 0) {
    kernels::dim_reduce(detail::ctx_of(a), DimOp::argmax, a.dtype(), view_of(a.shape(), d, d),
                        a.data_ptr(), out.data_ptr());
  }
  return out;
}

}  // namespace frugal
