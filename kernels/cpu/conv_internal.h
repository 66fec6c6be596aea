// Pieces shared by the CPU conv files: shape validation, the Eigen row-major views the GEMM
// paths use, and the three algorithms (pointwise GEMM, im2col GEMM, direct depthwise).
//
// Note [CPU conv algorithms]: conv.cpp picks, in this order,
//   depthwise (groups == C == K)              -> direct NHWC loops, channel innermost (depthwise.cpp)
//   pointwise (1x1, stride 1, padding 0)      -> one GEMM per group on the [N*H*W, C] view (conv.cpp)
//   anything else (stem 3x3, groups, dilation) -> im2col per chunk of images + GEMM (conv_gemm.cpp)
// The im2col column of output pixel p is laid out [groups, kh, kw, C/groups], so group g's
// columns are one contiguous block of each row and its weights [K/g, kh, kw, C/g] need no
// reordering: Y_g = Col_g * W_g^T.
#pragma once

#include <Eigen/Core>
#include <cstdint>

#include "kernels/context.h"
#include "kernels/conv.h"

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

// dbias[K] = sum over the rows of dy[rows, K].
template <typename T>
void bias_grad(int64_t rows, int64_t k, const T* dy, T* dbias);

template <typename T>
void depthwise_forward(const Context& ctx, const Conv2dShape& s, const T* x, const T* w,
                       const T* bias, T* y);
template <typename T>
void depthwise_backward_input(const Context& ctx, const Conv2dShape& s, const T* dy, const T* w,
                              T* dx);
template <typename T>
void depthwise_backward_weight(const Context& ctx, const Conv2dShape& s, const T* x,
                               const T* dy, T* dw);

template <typename T>
void im2col_forward(const Context& ctx, const Conv2dShape& s, const T* x, const T* w, T* y);
template <typename T>
void im2col_backward_input(const Context& ctx, const Conv2dShape& s, const T* dy, const T* w,
                           T* dx);
template <typename T>
void im2col_backward_weight(const Context& ctx, const Conv2dShape& s, const T* x, const T* dy,
                            T* dw);

}  // namespace frugal::kernels::cpu
