// Elementwise math beyond arithmetic: unary functions and their derivatives, maximum, minimum,
// pow and comparisons with broadcasting, and where. Storage is f32, f16 or bf16 (f64 on the CPU,
// whose kernels load 16-bit storage per element: Note [CPU dtypes]); compute is in float (double
// for f64); comparisons write u8 0/1.
#pragma once

#include <cstdint>

#include "kernels/elementwise.h"

namespace frugal::kernels {

enum class UnaryOp : uint8_t { abs, exp, log, sqrt, rsqrt, sigmoid, tanh, pow, clamp };
constexpr int kNumUnaryOps = 9;

// True when the derivative of op is cheapest from the forward output y (exp' = exp), so that
// backward keeps y instead of x; unary_backward then takes y as `s`.
constexpr bool unary_grad_from_output(UnaryOp op) {
  return op == UnaryOp::exp || op == UnaryOp::sqrt || op == UnaryOp::rsqrt ||
         op == UnaryOp::sigmoid || op == UnaryOp::tanh;
}

// y = f(x). p0 is pow's exponent and clamp's lower bound, p1 clamp's upper bound (pass -inf and
// inf for an absent bound).
FRUGAL_DECLARE_KERNEL(unary,
                      (const Context& ctx, UnaryOp op, DType dtype, int64_t n, const void* x,
                       double p0, double p1, void* y),
                      (ctx, op, dtype, n, x, p0, p1, y))
// dx = dy * f'(s), with s = y when unary_grad_from_output(op), else x. abs' is 0 at 0; clamp
// passes the gradient where lo <= x <= hi, as PyTorch does.
FRUGAL_DECLARE_KERNEL(unary_backward,
                      (const Context& ctx, UnaryOp op, DType dtype, int64_t n, const void* s,
                       const void* dy, double p0, double p1, void* dx),
                      (ctx, op, dtype, n, s, dy, p0, p1, dx))

enum class MathOp : uint8_t { maximum, minimum, pow, eq, ne, lt, le, gt, ge };
constexpr bool is_comparison(MathOp op) { return op >= MathOp::eq; }

// out = a op b over bc: dtype elements for maximum/minimum/pow, u8 for comparisons. maximum and
// minimum propagate NaN, as PyTorch's do. i64 and u8 operands: comparisons only, exact.
FRUGAL_DECLARE_KERNEL(binary_math,
                      (const Context& ctx, MathOp op, DType dtype, const Broadcast& bc,
                       const void* a, const void* b, void* out),
                      (ctx, op, dtype, bc, a, b, out))
// ga = dy * d(a op b)/da and gb = dy * d(a op b)/db at out's shape (not reduced to the inputs'
// shapes); either may be null. maximum/minimum split a tie half/half between a and b (PyTorch);
// pow's gradient for b is 0 where a == 0 and b >= 0 (PyTorch). Not for comparisons.
FRUGAL_DECLARE_KERNEL(binary_math_backward,
                      (const Context& ctx, MathOp op, DType dtype, const Broadcast& bc,
                       const void* a, const void* b, const void* dy, void* ga, void* gb),
                      (ctx, op, dtype, bc, a, b, dy, ga, gb))

// out[i] = cond[i] ? a[i] : b[i] for elements of elem_size bytes (1, 2, 4 or 8); a null a or b
// reads as zero bits (0.0 in every float dtype): the backward of where.
FRUGAL_DECLARE_KERNEL(where,
                      (const Context& ctx, size_t elem_size, int64_t n, const uint8_t* cond,
                       const void* a, const void* b, void* out),
                      (ctx, elem_size, n, cond, a, b, out))

}  // namespace frugal::kernels
