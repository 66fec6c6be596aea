// Differentiable tensor ops of the core: arithmetic with broadcasting (NHWC-friendly, e.g.
// [N, 1, 1, C] * [N, H, W, C]), scalar ops, reductions, matmul, casts and shape ops.
// Each checks devices and shapes and names the op and the shapes when they do not fit.
// NN ops (conv, batch norm, activations, pooling, losses) live in nn/functional.h.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace frugal {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rsub(const Tensor& a, double s);  // s - a
Tensor neg(const Tensor& a);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

// Sum / mean over `dims` (negative counts from the end); all dims when empty.
Tensor sum(const Tensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
// Sums `a` down to `shape` (the inverse of broadcasting `shape` up to a.shape()).
Tensor sum_to(const Tensor& a, const Shape& shape);

// [M, K] @ [K, N] -> [M, N]; trans_b takes b as [N, K] (a linear layer's weight).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_b = false);

// Differentiable cast (same as a.to(dtype)).
Tensor cast(const Tensor& a, DType dtype);
Tensor reshape(const Tensor& a, const Shape& shape);

// A copy of rows [start, start + count) along dim 0 (a micro-batch of a batch); no history.
Tensor slice_rows(const Tensor& a, int64_t start, int64_t count);

// Row-wise argmax of a [rows, cols] tensor, i64 [rows]; not differentiable.
Tensor argmax(const Tensor& a);

// In-place helpers used by optimizers and tests (no autograd; bump the version).
void fill_(const Tensor& t, double value);
void copy_(const Tensor& dst, const Tensor& src);  // same shape; any devices; casts dtype

// True when every element of a and b differs by at most atol + rtol * |b| (host compare).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace frugal
