// Helpers shared by the core's op implementations (not part of the public API): device and
// dtype checks with op-named messages, output allocation, kernel contexts, and the CPU's
// 16-bit fallback (Note [CPU dtypes] in kernels/cpu/cpu_common.h).
#pragma once

#include <initializer_list>
#include <string>

#include "core/tensor.h"
#include "kernels/context.h"

namespace frugal::detail {

inline kernels::Context ctx_of(const Tensor& t) { return kernels::Context::of(t.device()); }

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

}  // namespace frugal::detail
