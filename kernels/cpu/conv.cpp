// CPU conv2d entry points: validate the shape, pick the algorithm (Note [CPU conv algorithms]),
// and the pointwise (1x1) GEMM path, which views NHWC activations as [N*H*W, C] matrices.
#include "kernels/conv.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/chunks.h"
#include "kernels/cpu/conv_internal.h"
#include "kernels/cpu/cpu_common.h"

namespace frugal::kernels::cpu {

void check_conv_shape(const char* op, const Conv2dShape& s) {
  FRUGAL_CHECK(s.n >= 0 && s.h > 0 && s.w > 0 && s.c > 0 && s.k > 0, op,
               ": sizes must be positive (n may be 0): ", s.str());
  FRUGAL_CHECK(s.kh > 0 && s.kw > 0 && s.stride_h > 0 && s.stride_w > 0 && s.dil_h > 0 &&
                   s.dil_w > 0 && s.pad_h >= 0 && s.pad_w >= 0,
               op, ": kernel, stride and dilation must be positive, padding >= 0: ", s.str());
  FRUGAL_CHECK(s.groups > 0 && s.c % s.groups == 0, op,
               ": input channels not divisible by groups: ", s.str());
  FRUGAL_CHECK(s.k % s.groups == 0, op, ": output channels not divisible by groups: ", s.str());
  FRUGAL_CHECK(s.oh() > 0 && s.ow() > 0, op, ": empty output (", s.oh(), "x", s.ow(),
               "), input too small for the kernel: ", s.str());
}

template <typename T>
void bias_grad(const Context& ctx, int64_t rows, int64_t k, const T* dy, T* dbias) {
  // Partial sums in double per chunk: dbias adds up N*OH*OW terms.
  int64_t chunks = chunk_count(rows, k);
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(chunks * k) * sizeof(double));
  double* partial = static_cast<double*>(buf.get());  // [chunks, K]
  std::fill(partial, partial + chunks * k, 0.0);
  for_each_chunk(rows, chunks, [&](int64_t t, int64_t begin, int64_t end) {
    double* __restrict acc = partial + t * k;
    for (int64_t r = begin; r < end; ++r) {
      const T* __restrict row = dy + r * k;
      for (int64_t j = 0; j < k; ++j) acc[j] += static_cast<double>(row[j]);
    }
  });
  for (int64_t j = 0; j < k; ++j) {
    double sum = 0;
    for (int64_t t = 0; t < chunks; ++t) sum += partial[t * k + j];
    dbias[j] = static_cast<T>(sum);
  }
}

template <typename T>
void gemm_tn_split_depth(const Context& ctx, int64_t m, int64_t p, int64_t q, const T* a,
                         int64_t lda, const T* b, int64_t ldb, T* out, bool accumulate) {
  auto dst = mat(out, p, q, q);
  int64_t chunks = chunk_count(m, p * q, 65536);
  if (chunks <= 1) {
    if (accumulate) {
      dst.noalias() += mat(a, m, p, lda).transpose() * mat(b, m, q, ldb);
    } else {
      dst.noalias() = mat(a, m, p, lda).transpose() * mat(b, m, q, ldb);
    }
    return;
  }
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(chunks * p * q) * sizeof(T));
  T* partial = static_cast<T*>(buf.get());  // [chunks, p, q]
  for_each_chunk(m, chunks, [&](int64_t t, int64_t begin, int64_t end) {
    // inside the parallel region Eigen runs this GEMM on the calling thread only
    mat(partial + t * p * q, p, q, q).noalias() =
        mat(a + begin * lda, end - begin, p, lda).transpose() *
        mat(b + begin * ldb, end - begin, q, ldb);
  });
  if (!accumulate) dst = mat(static_cast<const T*>(partial), p, q, q);
  for (int64_t t = accumulate ? 0 : 1; t < chunks; ++t) {
    dst += mat(static_cast<const T*>(partial) + t * p * q, p, q, q);
  }
}

namespace {

template <typename T>
void add_bias(int64_t rows, int64_t k, const T* bias, T* y) {
  parallel_for(rows, std::max<int64_t>(1, 32768 / k), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* __restrict row = y + r * k;
      for (int64_t j = 0; j < k; ++j) row[j] += bias[j];
    }
  });
}

// Per group g: Y_g[M, K/g] = X_g[M, C/g] * W_g[K/g, C/g]^T, M = N*H*W.
template <typename T>
void pointwise_forward(const Conv2dShape& s, const T* x, const T* w, T* y) {
  int64_t m = s.n * s.h * s.w, cg = s.cin_per_group(), kg = s.cout_per_group();
  for (int64_t g = 0; g < s.groups; ++g) {
    mat(y + g * kg, m, kg, s.k).noalias() =
        mat(x + g * cg, m, cg, s.c) * mat(w + g * kg * cg, kg, cg, cg).transpose();
  }
}

// dX_g[M, C/g] = dY_g[M, K/g] * W_g[K/g, C/g]
template <typename T>
void pointwise_backward_input(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  int64_t m = s.n * s.h * s.w, cg = s.cin_per_group(), kg = s.cout_per_group();
  for (int64_t g = 0; g < s.groups; ++g) {
    mat(dx + g * cg, m, cg, s.c).noalias() =
        mat(dy + g * kg, m, kg, s.k) * mat(w + g * kg * cg, kg, cg, cg);
  }
}

// dW_g[K/g, C/g] = dY_g[M, K/g]^T * X_g[M, C/g]
template <typename T>
void pointwise_backward_weight(const Context& ctx, const Conv2dShape& s, const T* x, const T* dy,
                               T* dw) {
  int64_t m = s.n * s.h * s.w, cg = s.cin_per_group(), kg = s.cout_per_group();
  for (int64_t g = 0; g < s.groups; ++g) {
    gemm_tn_split_depth(ctx, m, kg, cg, dy + g * kg, s.k, x + g * cg, s.c, dw + g * kg * cg, false);
  }
}

}  // namespace

void conv2d_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                    const void* w, const void* bias, void* y) {
  check_conv_shape("conv2d_forward", s);
  if (s.n == 0) return;
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "conv2d_forward", {
    auto* xp = static_cast<const T*>(x);
    auto* wp = static_cast<const T*>(w);
    auto* bp = static_cast<const T*>(bias);
    auto* yp = static_cast<T*>(y);
    if (s.depthwise()) {
      depthwise_forward<T>(ctx, s, xp, wp, bp, yp);  // bias fused
    } else {
      if (is_pointwise(s)) {
        pointwise_forward<T>(s, xp, wp, yp);
      } else {
        im2col_forward<T>(ctx, s, xp, wp, yp);
      }
      if (bp != nullptr) add_bias<T>(s.n * s.oh() * s.ow(), s.k, bp, yp);
    }
  });
}

void conv2d_backward_input(const Context& ctx, DType dtype, const Conv2dShape& s, const void* dy,
                           const void* w, void* dx) {
  check_conv_shape("conv2d_backward_input", s);
  if (s.n == 0) return;
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "conv2d_backward_input", {
    auto* dyp = static_cast<const T*>(dy);
    auto* wp = static_cast<const T*>(w);
    auto* dxp = static_cast<T*>(dx);
    if (s.depthwise()) {
      depthwise_backward_input<T>(ctx, s, dyp, wp, dxp);
    } else if (is_pointwise(s)) {
      pointwise_backward_input<T>(s, dyp, wp, dxp);
    } else {
      im2col_backward_input<T>(ctx, s, dyp, wp, dxp);
    }
  });
}

void conv2d_backward_weight(const Context& ctx, DType dtype, DType dw_dtype, const Conv2dShape& s,
                            const void* x, const void* dy, void* dw, void* dbias) {
  check_conv_shape("conv2d_backward_weight", s);
  FRUGAL_CHECK(dw_dtype == dtype, "conv2d_backward_weight: the CPU writes dw in the input dtype ",
               dtype, ", not ", dw_dtype);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "conv2d_backward_weight", {
    auto* xp = static_cast<const T*>(x);
    auto* dyp = static_cast<const T*>(dy);
    auto* dwp = static_cast<T*>(dw);
    auto* dbp = static_cast<T*>(dbias);
    if (s.n == 0) {  // an empty batch contributes nothing; outputs are still overwritten
      std::fill(dwp, dwp + s.k * s.kh * s.kw * s.cin_per_group(), T(0));
      if (dbp != nullptr) std::fill(dbp, dbp + s.k, T(0));
      return;
    }
    if (s.depthwise()) {
      depthwise_backward_weight<T>(ctx, s, xp, dyp, dwp);
    } else if (is_pointwise(s)) {
      pointwise_backward_weight<T>(ctx, s, xp, dyp, dwp);
    } else {
      im2col_backward_weight<T>(ctx, s, xp, dyp, dwp);
    }
    if (dbp != nullptr) bias_grad<T>(ctx, s.n * s.oh() * s.ow(), s.k, dyp, dbp);
  });
}

template void gemm_tn_split_depth<float>(const Context&, int64_t, int64_t, int64_t, const float*,
                                         int64_t, const float*, int64_t, float*, bool);
template void gemm_tn_split_depth<double>(const Context&, int64_t, int64_t, int64_t, const double*,
                                          int64_t, const double*, int64_t, double*, bool);
template void bias_grad<float>(const Context&, int64_t, int64_t, const float*, float*);
template void bias_grad<double>(const Context&, int64_t, int64_t, const double*, double*);

}  // namespace frugal::kernels::cpu
