// Differentiable tensor ops of the core: arithmetic with broadcasting (NHWC-friendly, e.g.
// [N, 1, 1, C] * [N, H, W, C]), scalar ops, reductions, matmul, casts and shape ops.
// Each checks devices and shapes and names the op and the shapes when they do not fit.
// NN ops (conv, batch norm, activations, pooling, losses) live in nn/functional.h.
#pragma once

#include <optional>
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

// Elementwise math, differentiable (kernels/math.h). Binary ops broadcast and promote mixed
// dtypes like add (a 0-d operand does not widen one with dims: detail::result_dtype). abs' is 0 at
// 0; clamp passes the gradient where lo <= x <= hi (PyTorch); maximum/minimum split the gradient of
// a tie half/half between a and b (PyTorch's maximum). Under autocast exp, log, rsqrt and pow run
// in f32 (PyTorch's f32 list).
Tensor abs(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor pow(const Tensor& a, double exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);
// At least one bound; with lo > hi every element becomes hi (PyTorch).
Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi = std::nullopt);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// Comparisons with broadcasting (tensor-scalar rounds the scalar to a's dtype): u8 0/1 tensors,
// not differentiable. i64 and u8 tensors compare exactly with their own dtype and with numbers
// (Note [Integer comparisons] in core/ops_compare.cpp): eq(argmax(logits, 1), labels).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);
// cond (u8, non-zero = true) ? a : b with cond, a and b broadcast together; the gradient goes to
// a where cond is set, to b elsewhere.
//   Tensor y = where(gt(x, 0.0), x, mul(x, 0.1));   // leaky relu
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Softmax / log-softmax along dim, max-subtracted (16-bit data computed in f32 in the kernel;
// f32 under autocast, as PyTorch).
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);

// Sum / mean over `dims` (negative counts from the end); all dims when empty.
Tensor sum(const Tensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
// Maximum over `dims` (all when empty); the gradient is split evenly between tied maxima.
Tensor amax(const Tensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
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
// Index of the first maximum along dim (NaN counts as the maximum), i64; not differentiable.
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);

// Copying layout ops (only reshape is a view), differentiable.
// Elements [start, start + length) of dim (start may count from the end).
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
// Python's a[..., start:end:step, ...] along dim: negative bounds count from the end and
// out-of-range ones are clamped; step >= 1.
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// Joins tensors along an existing dim (cat) or a new one (stack); mixed floating dtypes promote.
//   Tensor y = cat({a, b}, -1);   // [N, H, W, Ca] and [N, H, W, Cb] -> [N, H, W, Ca + Cb]
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);
// Dimension i of the result is dimension dims[i] of a.
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);

// In-place helpers used by optimizers and tests (no autograd; bump the version). Into a tensor
// that requires grad they write only under NoGradGuard (torch.no_grad()): with grad mode on they
// refuse, as its gradient would come out wrong.
void fill_(const Tensor& t, double value);
void copy_(const Tensor& dst, const Tensor& src);  // same shape; any devices; casts dtype

// True when every element of a and b differs by at most atol + rtol * |b| (host compare).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace frugal
