// Pieces shared by the CPU conv files: shape validation, the Eigen row-major views the GEMM
// paths use, and the three algorithms (pointwise GEMM, im2col GEMM, direct depthwise).
//
// Note [CPU conv algorithms]: conv.cpp picks, in this order,
//   depthwise (groups == C == K): direct NHWC loops, channel innermost (depthwise.cpp);
//   pointwise (1x1, stride 1, pad 0): one GEMM per group on the [N*H*W, C] view (conv.cpp);
//   anything else (stem 3x3, groups, dilation): im2col per chunk of images + GEMM (conv_gemm.cpp).
// The im2col column of output pixel p is laid out [groups, kh, kw, C/groups], so group g's
// columns are one contiguous block of each row and its weights [K/g, kh, kw, C/g] need no
// reordering: Y_g = Col_g * W_g^T.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#include "kernels/context.h"
#include "kernels/conv.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/typed.h"

namespace frugal::kernels::cpu {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatView = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using ConstMatView = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// A [rows, cols] row-major view whose rows are `stride` elements apart.
template <typename T>
MatView<T> mat(T* p, int64_t rows, int64_t cols, int64_t stride) {
  return MatView<T>(p, rows, cols, Eigen::OuterStride<>(stride));
}
template <typename T>
ConstMatView<T> mat(const T* p, int64_t rows, int64_t cols, int64_t stride) {
  return ConstMatView<T>(p, rows, cols, Eigen::OuterStride<>(stride));
}

// Throws naming `op` and s.str() unless s describes a valid convolution.
void check_conv_shape(const char* op, const Conv2dShape& s);

inline bool is_pointwise(const Conv2dShape& s) {
  return s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 &&
         s.pad_w == 0;
}

// out[p, q] (= or +=) a[m, p]^T * b[m, q], a and b row-major with row strides lda and ldb.
// Weight gradients have a tiny output and a huge depth m = N*OH*OW, which Eigen's own
// parallel GEMM (split over the output) handles badly on busy cores; this splits m instead,
// one serial GEMM per chunk into its own workspace slot, summed in chunk order.
template <typename T>
void gemm_tn_split_depth(const Context& ctx, int64_t m, int64_t p, int64_t q, const T* a,
                         int64_t lda, const T* b, int64_t ldb, T* out, bool accumulate);

// The algorithms below take tensors of storage type S (float, double, f16_t, bf16_t) and compute
// in Num<S>::C (kernels/cpu/typed.h); weight gradients are stored in D: S, or float for 16-bit S.

// y[rows, K] += bias[K] on every row, in the compute type.
template <typename T>
void add_bias(int64_t rows, int64_t k, const T* bias, T* y) {
  parallel_for(rows, std::max<int64_t>(1, 32768 / k), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* __restrict row = y + r * k;
      for (int64_t j = 0; j < k; ++j) row[j] += bias[j];
    }
  });
}

// dbias[K] = sum over the rows of dy[rows, K].
template <typename S, typename D>
void bias_grad(const Context& ctx, int64_t rows, int64_t k, const S* dy, D* dbias);

template <typename S>
void depthwise_forward(const Context& ctx, const Conv2dShape& s, const S* x, const S* w,
                       const S* bias, S* y);
template <typename S>
void depthwise_backward_input(const Context& ctx, const Conv2dShape& s, const S* dy, const S* w,
                              S* dx);
template <typename S, typename D>
void depthwise_backward_weight(const Context& ctx, const Conv2dShape& s, const S* x, const S* dy,
                               D* dw);

// y = conv(x, w) (+ bias when not null)
template <typename S>
void im2col_forward(const Context& ctx, const Conv2dShape& s, const S* x, const S* w, const S* bias,
                    S* y);
template <typename S>
void im2col_backward_input(const Context& ctx, const Conv2dShape& s, const S* dy, const S* w,
                           S* dx);
template <typename S, typename D>
void im2col_backward_weight(const Context& ctx, const Conv2dShape& s, const S* x, const S* dy,
                            D* dw);

}  // namespace frugal::kernels::cpu
