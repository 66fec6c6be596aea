// Helpers shared by the core's op implementations (not part of the public API): device and
// dtype checks with op-named messages, output allocation, kernel contexts, and the CPU's
// 16-bit fallback (Note [CPU dtypes] in kernels/cpu/cpu_common.h).
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/context.h"
#include "kernels/math.h"

namespace frugal::detail {

inline kernels::Context ctx_of(const Tensor& t) { return kernels::Context::of(t.device()); }
// t's bytes, or null for an undefined tensor (an optional operand of a kernel entry).
inline const void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Throws "op: expected tensors on one device, got cpu and cuda:0 ([..] f32 cpu, ...)".
void check_same_device(const char* op, std::initializer_list<const Tensor*> ts);
void check_defined(const char* op, std::initializer_list<const Tensor*> ts);
void check_floating(const char* op, const Tensor& t);

// True when an op on `t` must run in f32 and be rounded back: 16-bit data on the CPU.
inline bool cpu_half(const Tensor& t) { return t.device().is_cpu() && is_low_precision(t.dtype()); }

// Cast without autograd (the raw kernel); returns t itself when already `dtype`.
Tensor cast_raw(const Tensor& t, DType dtype);
// Broadcast `t` up to `shape` without autograd (materialised copy).
Tensor expand_raw(const Tensor& t, const Shape& shape);
// Sum `t` down to `shape` without autograd (shape broadcastable to t.shape()).
Tensor sum_to_raw(const Tensor& t, const Shape& shape);

// The new ops of core/ops_math.cpp, ops_compare.cpp, ops_dim.cpp and ops_layout.cpp share these.

// Dimension d of a rank-`ndim` tensor (negative counts from the end); throws naming op and shape.
int64_t wrap_dim(const char* op, int64_t d, const Shape& shape, bool allow_end = false);

// The broadcast of a's and b's shapes; throws "op: shapes [2, 3] and [4, 3] cannot be broadcast
// ([2, 3] f32 cpu and [4, 3] f16 cpu)" otherwise.
Shape broadcast_of(const char* op, const Tensor& a, const Tensor& b);

// The dtype of a binary op on floating tensors a and b, PyTorch's result type: a 0-d operand (a
// scalar tensor) does not widen one with dims (bf16 activations times an f32 scalar stay bf16),
// else the widest (promote).
DType result_dtype(const Tensor& a, const Tensor& b);

// out = a op b with broadcasting and result_dtype's promotion (u8 for comparisons); no autograd.
Tensor binary_math_raw(kernels::MathOp op, const char* name, const Tensor& a, const Tensor& b);

// Copies the elements of `src` laid out with `src_strides` (elements, 0 to broadcast) from
// element `src_offset` into `dst` from `dst_offset` with `dst_strides`, over `dims`. Any dtype
// (by element size), both on one device; nothing happens on meta.
void strided_copy_raw(const Tensor& src, int64_t src_offset,
                      const std::vector<int64_t>& src_strides, const Tensor& dst,
                      int64_t dst_offset, const std::vector<int64_t>& dst_strides,
                      const Shape& dims);
// `t` broadcast to `shape` as a copy, any dtype; t itself when already that shape.
Tensor expand_copy_raw(const Tensor& t, const Shape& shape);
// `t` with its dimensions in the order `perm` (a permutation), as a copy; no autograd.
Tensor permute_raw(const Tensor& t, const std::vector<int64_t>& perm);

}  // namespace frugal::detail
