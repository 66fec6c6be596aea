// CPU conv2d entry points: validate the shape, pick the algorithm (Note [CPU conv algorithms]),
// and the pointwise (1x1) GEMM path, which views NHWC activations as [N*H*W, C] matrices.
// f16 and bf16 run in f32 inside every algorithm (Note [CPU dtypes]): rows are widened into
// per-thread or per-chunk buffers, never into an f32 copy of the tensor.
#include "kernels/conv.h"

#include <algorithm>
#include <cstring>

#include "kernels/batch_norm.h"
#include "kernels/cpu/chunks.h"
#include "kernels/cpu/conv_internal.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/onednn_gemm.h"
#include "kernels/cpu/widen.h"

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

template <typename S, typename D>
void bias_grad(const Context& ctx, int64_t rows, int64_t k, const S* dy, D* dbias) {
  // Partial sums in double per chunk: dbias adds up N*OH*OW terms.
  int64_t chunks = chunk_count(rows, k);
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(chunks * k) * sizeof(double));
  double* partial = static_cast<double*>(buf.get());  // [chunks, K]
  std::fill(partial, partial + chunks * k, 0.0);
  for_each_chunk(rows, chunks, [&](int64_t t, int64_t begin, int64_t end) {
    double* __restrict acc = partial + t * k;
    RowReader<S> read(k);
    for (int64_t r = begin; r < end; ++r) {
      const auto* __restrict row = read(dy, r);
      for (int64_t j = 0; j < k; ++j) acc[j] += static_cast<double>(row[j]);
    }
  });
  for (int64_t j = 0; j < k; ++j) {
    double sum = 0;
    for (int64_t t = 0; t < chunks; ++t) sum += partial[t * k + j];
    dbias[j] = Num<D>::store(static_cast<typename Num<D>::C>(sum));
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

// Rows per chunk of the 16-bit pointwise paths: a chunk's widened input and output rows (up to
// 1 MiB of f32) stay in the core's cache from widening through the GEMM to narrowing, and the
// chunk is deep enough for an efficient GEMM.
int64_t narrow_chunk_rows(int64_t cols) { return std::max<int64_t>(64, 131072 / cols); }

// Threads that the 16-bit pointwise paths split m rows over, each with its own buffers.
int64_t narrow_slices(int64_t m, int64_t chunk_rows) {
  return std::max<int64_t>(
      1, std::min<int64_t>(omp_get_max_threads(), (m + chunk_rows - 1) / chunk_rows));
}

// out[m, out_cols] = in[m, in_cols] * W (+ bias) per group for 16-bit storage, W and bias in
// f32: the forward (W_g [out/g, in/g], used transposed) and the input gradient (W_g [in/g,
// out/g]). The bias is added before the one rounding to 16 bits. Each thread
// takes a slice of rows and runs it chunk by chunk through its own f32 buffers, with a serial
// GEMM per chunk (Eigen runs single-threaded inside the parallel region).
template <typename S>
void narrow_rows_times_weights(const Context& ctx, int64_t m, int64_t groups, int64_t in_cols,
                               int64_t out_cols, const S* in, const float* w, bool w_out_by_in,
                               const float* bias, S* out) {
  const int64_t ig = in_cols / groups, og = out_cols / groups;
  const int64_t rows = narrow_chunk_rows(std::max(in_cols, out_cols));
  const int64_t slices = narrow_slices(m, rows);
  const int64_t per_slice = rows * (in_cols + out_cols);
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(slices * per_slice) * sizeof(float));
  for_each_chunk(m, slices, [&](int64_t t, int64_t begin, int64_t end) {
    float* ib = static_cast<float*>(buf.get()) + t * per_slice;
    float* ob = ib + rows * in_cols;
    for (int64_t r0 = begin; r0 < end; r0 += rows) {
      const int64_t nr = std::min(rows, end - r0);
      widen(in + r0 * in_cols, nr * in_cols, ib);
      for (int64_t g = 0; g < groups; ++g) {
        auto dst = mat(ob + g * og, nr, og, out_cols);
        auto src = mat(static_cast<const float*>(ib) + g * ig, nr, ig, in_cols);
        if (w_out_by_in) {
          dst.noalias() = src * mat(w + g * og * ig, og, ig, ig).transpose();
        } else {
          dst.noalias() = src * mat(w + g * ig * og, ig, og, og);
        }
      }
      if (bias != nullptr) add_bias(nr, out_cols, bias, ob);
      narrow(ob, nr * out_cols, out + r0 * out_cols);
    }
  });
}

// dW_g[K/g, C/g] = dY_g^T * X_g for 16-bit storage: per-thread slices of rows, widened a chunk at
// a time, each summing into its own f32 partial; partials added in slice order into dw (D).
template <typename S, typename D>
void narrow_pointwise_backward_weight(const Context& ctx, const Conv2dShape& s, const S* x,
                                      const S* dy, D* dw) {
  const int64_t m = s.n * s.h * s.w, cg = s.cin_per_group(), kg = s.cout_per_group();
  const int64_t rows = narrow_chunk_rows(std::max(s.c, s.k));
  const int64_t slices = narrow_slices(m, rows);
  const int64_t w_numel = s.k * cg, per_slice = w_numel + rows * (s.c + s.k);
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(slices * per_slice) * sizeof(float));
  float* base = static_cast<float*>(buf.get());
  for_each_chunk(m, slices, [&](int64_t t, int64_t begin, int64_t end) {
    float* partial = base + t * per_slice;
    float* xb = partial + w_numel;
    float* dyb = xb + rows * s.c;
    std::fill(partial, partial + w_numel, 0.0f);
    for (int64_t r0 = begin; r0 < end; r0 += rows) {
      const int64_t nr = std::min(rows, end - r0);
      widen(x + r0 * s.c, nr * s.c, xb);
      widen(dy + r0 * s.k, nr * s.k, dyb);
      for (int64_t g = 0; g < s.groups; ++g) {
        mat(partial + g * kg * cg, kg, cg, cg).noalias() +=
            mat(static_cast<const float*>(dyb) + g * kg, nr, kg, s.k).transpose() *
            mat(static_cast<const float*>(xb) + g * cg, nr, cg, s.c);
      }
    }
  });
  // The slices' sum, split over the threads too: on one thread it would leave the others
  // waiting for a pass over every weight (320x1280 of them in MobileNetV2's last conv).
  parallel_for(w_numel, 16384, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      float sum = base[q];
      for (int64_t t = 1; t < slices; ++t) sum += base[t * per_slice + q];
      dw[q] = Num<D>::store(sum);
    }
  });
}

// The weights of a 16-bit conv in f32, for the GEMM paths (K * kh * kw * C/g elements), and
// the bias (K more) when there is one.
template <typename S>
memory::DataPtr widened_weights(const Context& ctx, const Conv2dShape& s, const S* w,
                                const S* bias) {
  const int64_t numel = s.k * s.kh * s.kw * s.cin_per_group();
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(numel + s.k) * sizeof(float));
  // on the threads: run serially, the others would wait through it
  parallel_for(numel, 32768, [&](int64_t b, int64_t e) {
    widen(w + b, e - b, static_cast<float*>(buf.get()) + b);
  });
  if (bias != nullptr) widen(bias, s.k, static_cast<float*>(buf.get()) + numel);
  return buf;
}

// The one-group pointwise convs through oneDNN (Note [oneDNN GEMMs]), f32 and bf16 storage read
// and written directly; false when oneDNN declines, for the Eigen paths. Y[M, K] = X[M, C] *
// W[K, C]^T (+ bias, in f32 before the one rounding), M = N*H*W.
template <typename S>
bool onednn_pointwise_forward(const Context& ctx, const Conv2dShape& s, const S* x, const S* w,
                              const S* bias, S* y) {
  if constexpr (std::is_same_v<S, double>) {
    return false;
  } else {
    if (s.groups != 1) return false;
    memory::DataPtr bias_buf;
    const float* b32 = nullptr;
    if (bias != nullptr) {
      if constexpr (std::is_same_v<S, float>) {
        b32 = bias;
      } else {
        bias_buf = ctx.workspace(static_cast<size_t>(s.k) * sizeof(float));
        widen(bias, s.k, static_cast<float*>(bias_buf.get()));
        b32 = static_cast<const float*>(bias_buf.get());
      }
    }
    const DType t = Num<S>::dtype;
    return onednn_gemm(ctx, s.n * s.h * s.w, s.k, s.c, {x, t, s.c}, {w, t, s.c, true}, y, t, s.k,
                       b32);
  }
}

// dX[M, C] = dY[M, K] * W[K, C]
template <typename S>
bool onednn_pointwise_backward_input(const Context& ctx, const Conv2dShape& s, const S* dy,
                                     const S* w, S* dx) {
  const DType t = Num<S>::dtype;
  return s.groups == 1 &&
         onednn_gemm(ctx, s.n * s.h * s.w, s.c, s.k, {dy, t, s.k}, {w, t, s.c}, dx, t, s.c);
}

// dW[K, C] = dY[M, K]^T * X[M, C], dW in D (f32 for 16-bit S, or S)
template <typename S, typename D>
bool onednn_pointwise_backward_weight(const Context& ctx, const Conv2dShape& s, const S* x,
                                      const S* dy, D* dw) {
  const DType t = Num<S>::dtype;
  return s.groups == 1 && onednn_gemm(ctx, s.k, s.c, s.n * s.h * s.w, {dy, t, s.k, true},
                                      {x, t, s.c}, dw, Num<D>::dtype, s.c);
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
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "conv2d_forward", {
    auto* xp = static_cast<const S*>(x);
    auto* wp = static_cast<const S*>(w);
    auto* bp = static_cast<const S*>(bias);
    auto* yp = static_cast<S*>(y);
    if (s.depthwise()) {
      depthwise_forward<S>(ctx, s, xp, wp, bp, yp);  // bias fused
    } else {
      // the bias joins before any rounding to 16 bits
      if (is_pointwise(s) && onednn_pointwise_forward<S>(ctx, s, xp, wp, bp, yp)) {
        // done, bias included
      } else if (is_pointwise(s)) {
        if constexpr (is_narrow_v<S>) {
          memory::DataPtr wf = widened_weights(ctx, s, wp, bp);
          const float* w32 = static_cast<const float*>(wf.get());
          const float* b32 = bp != nullptr ? w32 + s.k * s.c / s.groups : nullptr;
          narrow_rows_times_weights<S>(ctx, s.n * s.h * s.w, s.groups, s.c, s.k, xp, w32, true, b32,
                                       yp);
        } else {
          pointwise_forward<S>(s, xp, wp, yp);
          if (bp != nullptr) add_bias<S>(s.n * s.h * s.w, s.k, bp, yp);
        }
      } else {
        im2col_forward<S>(ctx, s, xp, wp, bp, yp);
      }
    }
  });
}

void conv2d_backward_input(const Context& ctx, DType dtype, const Conv2dShape& s, const void* dy,
                           const void* w, void* dx) {
  check_conv_shape("conv2d_backward_input", s);
  if (s.n == 0) return;
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "conv2d_backward_input", {
    auto* dyp = static_cast<const S*>(dy);
    auto* wp = static_cast<const S*>(w);
    auto* dxp = static_cast<S*>(dx);
    if (s.depthwise()) {
      depthwise_backward_input<S>(ctx, s, dyp, wp, dxp);
    } else if (is_pointwise(s) && onednn_pointwise_backward_input<S>(ctx, s, dyp, wp, dxp)) {
      // done
    } else if (is_pointwise(s)) {
      if constexpr (is_narrow_v<S>) {
        memory::DataPtr wf = widened_weights<S>(ctx, s, wp, nullptr);
        narrow_rows_times_weights<S>(ctx, s.n * s.h * s.w, s.groups, s.k, s.c, dyp,
                                     static_cast<const float*>(wf.get()), false, nullptr, dxp);
      } else {
        pointwise_backward_input<S>(s, dyp, wp, dxp);
      }
    } else {
      im2col_backward_input<S>(ctx, s, dyp, wp, dxp);
    }
  });
}

namespace {

// dw (and dbias) in D from x and dy in S; D is S, or f32 for 16-bit S.
template <typename S, typename D>
void backward_weight(const Context& ctx, const Conv2dShape& s, const S* x, const S* dy, D* dw,
                     D* dbias) {
  if (s.n == 0) {  // an empty batch contributes nothing; outputs are still overwritten
    std::fill(dw, dw + s.k * s.kh * s.kw * s.cin_per_group(), Num<D>::store(0));
    if (dbias != nullptr) std::fill(dbias, dbias + s.k, Num<D>::store(0));
    return;
  }
  if (s.depthwise()) {
    depthwise_backward_weight<S, D>(ctx, s, x, dy, dw);
  } else if (is_pointwise(s) && onednn_pointwise_backward_weight<S, D>(ctx, s, x, dy, dw)) {
    // done
  } else if (is_pointwise(s)) {
    if constexpr (is_narrow_v<S>) {
      narrow_pointwise_backward_weight<S, D>(ctx, s, x, dy, dw);
    } else {
      pointwise_backward_weight<S>(ctx, s, x, dy, dw);
    }
  } else {
    im2col_backward_weight<S, D>(ctx, s, x, dy, dw);
  }
  if (dbias != nullptr) bias_grad<S, D>(ctx, s.n * s.oh() * s.ow(), s.k, dy, dbias);
}

}  // namespace

void conv2d_backward_weight(const Context& ctx, DType dtype, DType dw_dtype, const Conv2dShape& s,
                            const void* x, const void* dy, void* dw, void* dbias) {
  check_conv_shape("conv2d_backward_weight", s);
  FRUGAL_CHECK(dw_dtype == dtype || (is_low_precision(dtype) && dw_dtype == DType::f32),
               "conv2d_backward_weight: dw is written in the input dtype ", dtype,
               " or, for 16-bit inputs, in f32; not in ", dw_dtype);
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "conv2d_backward_weight", {
    auto* xp = static_cast<const S*>(x);
    auto* dyp = static_cast<const S*>(dy);
    if (dw_dtype == dtype) {
      backward_weight<S, S>(ctx, s, xp, dyp, static_cast<S*>(dw), static_cast<S*>(dbias));
    } else if constexpr (is_narrow_v<S>) {
      backward_weight<S, float>(ctx, s, xp, dyp, static_cast<float*>(dw),
                                static_cast<float*>(dbias));
    }
  });
}

namespace {

// x = act(bn(z)) in a workspace (Note [Batch norm inside the depthwise convolution]).
memory::DataPtr apply_bn_act(const Context& ctx, DType dtype, const Conv2dShape& s,
                             const BnActInput& in, const void* z) {
  const int64_t rows = s.n * s.h * s.w;
  memory::DataPtr x = ctx.workspace(static_cast<size_t>(rows * s.c) * dtype_size(dtype));
  cpu::batch_norm_act_apply(ctx, dtype, in.act, rows, s.c, z, in.gamma, in.beta, in.mean, in.invstd,
                            x.get());
  return x;
}

}  // namespace

void conv2d_forward_bn_act(const Context& ctx, DType dtype, const Conv2dShape& s,
                           const BnActInput& in, const void* z, const void* w, const void* bias,
                           void* y) {
  check_conv_shape("conv2d_forward_bn_act", s);
  memory::DataPtr x = apply_bn_act(ctx, dtype, s, in, z);
  cpu::conv2d_forward(ctx, dtype, s, x.get(), w, bias, y);
}

void conv2d_backward_weight_bn_act(const Context& ctx, DType dtype, DType dw_dtype,
                                   const Conv2dShape& s, const BnActInput& in, const void* z,
                                   const void* dy, void* dw, void* dbias) {
  check_conv_shape("conv2d_backward_weight_bn_act", s);
  memory::DataPtr x = apply_bn_act(ctx, dtype, s, in, z);
  cpu::conv2d_backward_weight(ctx, dtype, dw_dtype, s, x.get(), dy, dw, dbias);
}

template void gemm_tn_split_depth<float>(const Context&, int64_t, int64_t, int64_t, const float*,
                                         int64_t, const float*, int64_t, float*, bool);
template void gemm_tn_split_depth<double>(const Context&, int64_t, int64_t, int64_t, const double*,
                                          int64_t, const double*, int64_t, double*, bool);
template void bias_grad<float, float>(const Context&, int64_t, int64_t, const float*, float*);
template void bias_grad<double, double>(const Context&, int64_t, int64_t, const double*, double*);

}  // namespace frugal::kernels::cpu
