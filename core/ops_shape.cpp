// Shape and dtype ops (reshape, cast) and in-place helpers (fill_, copy_, allclose).
#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"

namespace frugal {

Tensor reshape(const Tensor& a, const Shape& shape) {
  detail::check_defined("reshape", {&a});
  std::vector<int64_t> dims = shape.dims();
  int64_t known = 1, infer = -1;
  // A product that wraps could equal the input's count ([9, 6148914691236517206] holds "6"
  // elements mod 2^64) and describe far more memory than there is: refused, unless an extent of
  // 0 makes the shape empty whatever the others are.
  const bool empty = std::find(dims.begin(), dims.end(), 0) != dims.end();
  for (size_t i = 0; i < dims.size(); ++i) {
    FRUGAL_CHECK(dims[i] >= -1, "reshape: negative extent ", dims[i], " in ", shape,
                 " (only -1, inferred, may be negative)");
    if (dims[i] == -1) {
      FRUGAL_CHECK(infer < 0, "reshape: more than one -1 in ", shape);
      infer = static_cast<int64_t>(i);
    } else if (!empty) {
      const bool overflows = __builtin_mul_overflow(known, dims[i], &known);
      FRUGAL_CHECK(!overflows, "reshape: ", shape, " holds more than 2^63 elements; ", describe(a),
                   " has ", a.numel());
    }
  }
  if (empty) known = 0;
  if (infer >= 0) {
    FRUGAL_CHECK(known > 0 && a.numel() % known == 0, "reshape: cannot reshape ", a.shape(), " to ",
                 shape);
    dims[static_cast<size_t>(infer)] = a.numel() / known;
  }
  Shape target(dims);
  (void)checked_nbytes(target, dtype_size(a.dtype()), "reshape");  // its bytes fit in 63 bits too
  FRUGAL_CHECK(target.numel() == a.numel(), "reshape: cannot reshape ", a.shape(), " (", a.numel(),
               " elements) to ", shape);
  Tensor out = a.detach();
  out.impl().shape = target;
  return autograd::record("reshape", {a}, out,
                          [in_shape = a.shape()](const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{reshape(g[0], in_shape)};
                          });
}

Tensor cast(const Tensor& a, DType dtype) {
  memory::OpScope op_scope("cast");  // Note [Allocation events]
  detail::check_defined("cast", {&a});
  if (a.dtype() == dtype) return a;
  Tensor out = detail::cast_raw(a, dtype);
  if (!is_floating(dtype)) return out;  // integer results carry no gradient
  return autograd::record("cast", {a}, out, [from = a.dtype()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{detail::cast_raw(g[0], from)};
  });
}

Tensor slice_rows(const Tensor& a, int64_t start, int64_t count) {
  memory::OpScope op_scope("slice_rows");  // Note [Allocation events]
  detail::check_defined("slice_rows", {&a});
  FRUGAL_CHECK(a.ndim() >= 1 && start >= 0 && count >= 1 && start + count <= a.size(0),
               "slice_rows: rows [", start, ", ", start + count, ") of ", describe(a));
  std::vector<int64_t> dims = a.shape().dims();
  dims[0] = count;
  Tensor out = Tensor::empty(Shape(dims), a.options());
  if (a.device().is_meta()) return out;
  const size_t row_bytes = a.nbytes() / static_cast<size_t>(a.size(0));
  const Device d = a.device();
  kernels::copy_bytes(
      kernels::Context::of(d), d, out.data_ptr(), d,
      static_cast<const char*>(a.data_ptr()) + static_cast<size_t>(start) * row_bytes,
      out.nbytes());
  return out;
}

namespace {

// An in-place write has no gradient of its own: into a tensor whose gradient autograd would
// compute it leaves that gradient wrong. PyTorch refuses it for a leaf; frugal for any tensor
// that requires grad while grad mode is on (write under NoGradGuard, as under torch.no_grad()).
void check_no_history(const char* op, const Tensor& t) {
  FRUGAL_CHECK(!(autograd::grad_enabled() && t.requires_grad()), op, ": ", describe(t),
               " requires grad, and an in-place write would leave its gradient wrong; write "
               "it under autograd::NoGradGuard (torch.no_grad())");
}

}  // namespace

void fill_(const Tensor& t, double value) {
  detail::check_defined("fill_", {&t});
  check_no_history("fill_", t);
  t.bump_version();
  if (t.device().is_meta()) return;
  kernels::fill(detail::ctx_of(t), t.dtype(), t.numel(), t.data_ptr_for_overwrite(), value);
}

void copy_(const Tensor& dst, const Tensor& src) {
  memory::OpScope op_scope("copy_");  // Note [Allocation events]
  detail::check_defined("copy_", {&dst, &src});
  check_no_history("copy_", dst);
  FRUGAL_CHECK(dst.shape() == src.shape(), "copy_: shapes differ: destination ", describe(dst),
               ", source ", describe(src));
  dst.bump_version();
  if (dst.device().is_meta()) return;
  Tensor s = src.detach();
  if (s.device() != dst.device()) s = s.to(dst.device());
  s = detail::cast_raw(s, dst.dtype());
  Device d = dst.device();
  const void* from = s.data_ptr();  // first: s may share dst's bytes and their pending write
  kernels::copy_bytes(kernels::Context::of(d), d, dst.data_ptr_for_overwrite(), d, from,
                      dst.nbytes());
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) return false;
    if (std::abs(va[i] - vb[i]) > atol + rtol * std::abs(vb[i])) return false;
  }
  return true;
}

}  // namespace frugal
