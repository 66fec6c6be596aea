// Copying layout ops (narrow, slice, cat, stack, transpose, permute) and the raw strided copy
// they share with broadcasting of any dtype; all run on kernels::strided_copy. Only `reshape`
// is a view in frugal, so each of these writes a new contiguous tensor.
#include <algorithm>
#include <numeric>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/layout.h"
#include "memory/events.h"

namespace frugal {
namespace detail {

int64_t wrap_dim(const char* op, int64_t d, const Shape& shape, bool allow_end) {
  int64_t n = shape.ndim() + (allow_end ? 1 : 0);
  int64_t j = d < 0 ? d + n : d;
  FRUGAL_CHECK(j >= 0 && j < n, op, ": dim ", d, " out of range for shape ", shape);
  return j;
}

void strided_copy_raw(const Tensor& src, int64_t src_offset,
                      const std::vector<int64_t>& src_strides, const Tensor& dst,
                      int64_t dst_offset, const std::vector<int64_t>& dst_strides,
                      const Shape& dims) {
  FRUGAL_CHECK(src.dtype() == dst.dtype() && src.device() == dst.device(),
               "strided_copy: ", describe(src), " into ", describe(dst));
  FRUGAL_CHECK(dims.ndim() <= kernels::kMaxDims, "strided_copy: rank ", dims.ndim(),
               " is over the ", kernels::kMaxDims, " dimensions frugal's copies take (", dims, ")");
  if (src.device().is_meta() || dims.numel() == 0) return;
  kernels::StridedCopy c;
  c.ndim = std::max<int>(1, static_cast<int>(dims.ndim()));
  c.numel = dims.numel();
  c.dims[0] = 1;
  for (int64_t i = 0; i < dims.ndim(); ++i) {
    c.dims[i] = dims[i];
    c.src_strides[i] = src_strides[static_cast<size_t>(i)];
    c.dst_strides[i] = dst_strides[static_cast<size_t>(i)];
  }
  const size_t es = dtype_size(src.dtype());
  kernels::strided_copy(
      ctx_of(src), es, c,
      static_cast<const char*>(src.data_ptr()) + src_offset * static_cast<int64_t>(es),
      static_cast<char*>(dst.data_ptr()) + dst_offset * static_cast<int64_t>(es));
}

Tensor expand_copy_raw(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Shape check = broadcast_shapes(t.shape(), shape, "expand");
  FRUGAL_CHECK(check == shape, "expand: cannot broadcast ", t.shape(), " to ", shape);
  std::vector<int64_t> in_strides = t.shape().strides(), src(static_cast<size_t>(shape.ndim()), 0);
  const int64_t off = shape.ndim() - t.ndim();
  for (int64_t i = 0; i < t.ndim(); ++i) {
    if (t.shape()[i] != 1) src[static_cast<size_t>(i + off)] = in_strides[static_cast<size_t>(i)];
  }
  Tensor out = Tensor::empty(shape, t.options());
  strided_copy_raw(t, 0, src, out, 0, shape.strides(), shape);
  return out;
}

Tensor permute_raw(const Tensor& t, const std::vector<int64_t>& perm) {
  std::vector<int64_t> dims, src;
  std::vector<int64_t> in_strides = t.shape().strides();
  for (int64_t p : perm) {
    dims.push_back(t.shape()[p]);
    src.push_back(in_strides[static_cast<size_t>(p)]);
  }
  Shape shape(dims);
  Tensor out = Tensor::empty(shape, t.options());
  strided_copy_raw(t, 0, src, out, 0, shape.strides(), shape);
  return out;
}

}  // namespace detail

namespace {

// Elements [start, start + length * step) by `step` along dim of a, as a copy.
Tensor narrow_raw(const Tensor& a, int64_t dim, int64_t start, int64_t length, int64_t step) {
  std::vector<int64_t> dims = a.shape().dims(), src = a.shape().strides();
  const int64_t offset = start * src[static_cast<size_t>(dim)];
  dims[static_cast<size_t>(dim)] = length;
  src[static_cast<size_t>(dim)] *= step;
  Shape shape(dims);
  Tensor out = Tensor::empty(shape, a.options());
  detail::strided_copy_raw(a, offset, src, out, 0, shape.strides(), shape);
  return out;
}

// Zeros of `in_shape` with g written at [start, start + length * step) by step along dim: the
// backward of narrow_raw.
Tensor unnarrow_raw(const Tensor& g, const Shape& in_shape, int64_t dim, int64_t start,
                    int64_t step) {
  Tensor out = zeros(in_shape, g.options());
  std::vector<int64_t> dst = in_shape.strides();
  const int64_t offset = start * dst[static_cast<size_t>(dim)];
  dst[static_cast<size_t>(dim)] *= step;
  detail::strided_copy_raw(g, 0, g.shape().strides(), out, offset, dst, g.shape());
  return out;
}

Tensor slice_impl(const char* op, const Tensor& a, int64_t dim, int64_t start, int64_t length,
                  int64_t step) {
  memory::OpScope op_scope(op);  // Note [Allocation events]
  Tensor out = narrow_raw(a, dim, start, length, step);
  return autograd::record(
      op, {a}, out, [in_shape = a.shape(), dim, start, step](const std::vector<Tensor>& g) {
        return std::vector<Tensor>{unnarrow_raw(g[0], in_shape, dim, start, step)};
      });
}

}  // namespace

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  detail::check_defined("narrow", {&a});
  const int64_t d = detail::wrap_dim("narrow", dim, a.shape());
  const int64_t size = a.shape()[d];
  if (start < 0) start += size;
  FRUGAL_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow: [", start, ", ",
               start + length, ") is outside dim ", dim, " of ", describe(a));
  return slice_impl("narrow", a, d, start, length, 1);
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  detail::check_defined("slice", {&a});
  const int64_t d = detail::wrap_dim("slice", dim, a.shape());
  FRUGAL_CHECK(step >= 1, "slice: step must be positive, got ", step, " for ", describe(a));
  const int64_t size = a.shape()[d];
  // Python's rules: negative counts from the end, out-of-range bounds are clamped.
  auto clip = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  start = clip(start);
  end = std::max(start, clip(end));
  return slice_impl("slice", a, d, start, (end - start + step - 1) / step, step);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  memory::OpScope op_scope("cat");  // Note [Allocation events]
  FRUGAL_CHECK(!tensors.empty(), "cat: expected at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined("cat", {&first});
  const int64_t d = detail::wrap_dim("cat", dim, first.shape());
  DType dt = first.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same_device("cat", {&first, &t});
    bool fits = t.ndim() == first.ndim();
    for (int64_t k = 0; fits && k < t.ndim(); ++k)
      fits = k == d || t.shape()[k] == first.shape()[k];
    FRUGAL_CHECK(fits, "cat: tensor ", i, " ", describe(t), " does not fit tensor 0 ",
                 describe(first), " along dim ", dim);
    FRUGAL_CHECK(t.dtype() == dt || (is_floating(t.dtype()) && is_floating(dt)), "cat: tensor ", i,
                 " ", describe(t), " and tensor 0 ", describe(first),
                 " have dtypes that do not promote");
    dt = promote(dt, t.dtype());
    total += t.shape()[d];
  }
  std::vector<int64_t> dims = first.shape().dims();
  dims[static_cast<size_t>(d)] = total;
  Shape shape(dims);
  Tensor out = Tensor::empty(shape, {dt, first.device()});
  std::vector<int64_t> sizes;
  int64_t offset = 0;
  const int64_t stride = shape.strides()[static_cast<size_t>(d)];
  for (const Tensor& t : tensors) {
    Tensor tc = detail::cast_raw(t, dt);
    detail::strided_copy_raw(tc, 0, tc.shape().strides(), out, offset * stride, shape.strides(),
                             tc.shape());
    sizes.push_back(t.shape()[d]);
    offset += t.shape()[d];
  }
  std::vector<DType> dtypes;
  for (const Tensor& t : tensors) dtypes.push_back(t.dtype());
  return autograd::record("cat", tensors, out, [d, sizes, dtypes](const std::vector<Tensor>& g) {
    std::vector<Tensor> grads;
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(detail::cast_raw(narrow_raw(g[0], d, start, sizes[i], 1), dtypes[i]));
      start += sizes[i];
    }
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  memory::OpScope op_scope("stack");  // Note [Allocation events]
  FRUGAL_CHECK(!tensors.empty(), "stack: expected at least one tensor");
  detail::check_defined("stack", {&tensors[0]});
  const int64_t d = detail::wrap_dim("stack", dim, tensors[0].shape(), /*allow_end=*/true);
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined("stack", {&tensors[i]});
    FRUGAL_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " ",
                 describe(tensors[i]), " differs in shape from tensor 0 ", describe(tensors[0]));
    std::vector<int64_t> dims = tensors[i].shape().dims();
    dims.insert(dims.begin() + d, 1);
    parts.push_back(reshape(tensors[i], Shape(dims)));
  }
  return cat(parts, d);
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  memory::OpScope op_scope("permute");  // Note [Allocation events]
  detail::check_defined("permute", {&a});
  std::vector<int64_t> perm;
  std::vector<bool> seen(static_cast<size_t>(a.ndim()), false);
  bool ok = static_cast<int64_t>(dims.size()) == a.ndim();
  for (int64_t d : dims) {
    if (!ok) break;
    int64_t j = d < 0 ? d + a.ndim() : d;
    ok = j >= 0 && j < a.ndim() && !seen[static_cast<size_t>(j)];
    if (ok) seen[static_cast<size_t>(j)] = true;
    perm.push_back(j);
  }
  FRUGAL_CHECK(ok, "permute: ", Shape(dims), " is not a permutation of the dims of ", describe(a));
  Tensor out = detail::permute_raw(a, perm);
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return autograd::record("permute", {a}, out, [inverse](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{detail::permute_raw(g[0], inverse)};
  });
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  memory::OpScope op_scope("transpose");  // Note [Allocation events]
  detail::check_defined("transpose", {&a});
  std::vector<int64_t> perm(static_cast<size_t>(a.ndim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(detail::wrap_dim("transpose", d0, a.shape()))],
            perm[static_cast<size_t>(detail::wrap_dim("transpose", d1, a.shape()))]);
  return permute(a, perm);
}

}  // namespace frugal
