// Elementwise kernels: broadcasting binary ops, affine scalar ops, activations, casts, fills and
// copies. All operands of one call share a dtype (the core promotes first); compute is in
// acc_t (float for f16/bf16/f32, double for f64).
#pragma once

#include <cstdint>

#include "base/shape.h"
#include "kernels/context.h"

namespace frugal::kernels {

constexpr int kMaxDims = 6;

// Index arithmetic for out = a (op) b with NumPy broadcasting, right-aligned to out's rank.
// Strides are in elements, 0 along broadcast dimensions. Plain data so CUDA can take it by value.
struct Broadcast {
  int ndim = 0;
  int64_t numel = 0;
  int64_t out_dims[kMaxDims] = {};
  int64_t a_strides[kMaxDims] = {};
  int64_t b_strides[kMaxDims] = {};
};
// Throws when the rank exceeds kMaxDims or a, b do not broadcast to out.
Broadcast make_broadcast(const Shape& out, const Shape& a, const Shape& b);

enum class BinaryOp : uint8_t { add, sub, mul, div };

// out = a op b over bc (out contiguous with bc.out_dims).
FRUGAL_DECLARE_KERNEL(binary,
                      (const Context& ctx, BinaryOp op, DType dtype, const Broadcast& bc,
                       const void* a, const void* b, void* out),
                      (ctx, op, dtype, bc, a, b, out))

// y = alpha * x + beta (neg, scalar add/sub/mul/div, rsub).
FRUGAL_DECLARE_KERNEL(affine,
                      (const Context& ctx, DType dtype, int64_t n, const void* x, double alpha,
                       double beta, void* y),
                      (ctx, dtype, n, x, alpha, beta, y))

// identity is there for fused kernels (batch norm without an activation); as a standalone kernel
// it copies.
enum class Activation : uint8_t { relu, relu6, hardswish, silu, sigmoid, identity };
constexpr int kNumActivations = 6;

// y = f(x)
FRUGAL_DECLARE_KERNEL(activation_forward,
                      (const Context& ctx, Activation act, DType dtype, int64_t n, const void* x,
                       void* y),
                      (ctx, act, dtype, n, x, y))
// dx = f'(x) * dy, always from the forward input x. relu/relu6 pass the gradient where
// 0 < x (< 6), as PyTorch does (zero at the kinks).
FRUGAL_DECLARE_KERNEL(activation_backward,
                      (const Context& ctx, Activation act, DType dtype, int64_t n, const void* x,
                       const void* dy, void* dx),
                      (ctx, act, dtype, n, x, dy, dx))

// y = (to) x for any floating dtypes (f64 only on the CPU); round to nearest even. From i64 and u8
// to floats too (masks and counts); between any dtypes on the CPU.
FRUGAL_DECLARE_KERNEL(cast,
                      (const Context& ctx, DType from, DType to, int64_t n, const void* x, void* y),
                      (ctx, from, to, n, x, y))

// y[i] += delta for i < n: i64 counters (a synchronized BatchNorm's num_batches_tracked, the
// captured step's random-number offset) kept on the device, so counting needs no host copy and a
// captured graph advances them on every replay.
FRUGAL_DECLARE_KERNEL(add_i64, (const Context& ctx, int64_t n, int64_t* y, int64_t delta),
                      (ctx, n, y, delta))

// y[i] = value for any dtype (i64 and u8 included).
FRUGAL_DECLARE_KERNEL(fill, (const Context& ctx, DType dtype, int64_t n, void* y, double value),
                      (ctx, dtype, n, y, value))

// Copies bytes between two devices (either side may be the CPU; one must be ctx.device or CPU).
// Asynchronous on ctx's stream when a CUDA device is involved; synchronises before returning
// when the destination is the host so the caller can read it.
void copy_bytes(const Context& ctx, Device dst_device, void* dst, Device src_device,
                const void* src, size_t bytes);

}  // namespace frugal::kernels
