// Row-major GEMM through cuBLAS: a row-major [m, n] result is the column-major [n, m] product
// b^T a^T, so the operands swap places and no data moves. f16/bf16 run on tensor cores with f32
// accumulation (CUBLAS_COMPUTE_32F); f32 stays IEEE f32 (the handle's math mode allows no TF32)
// unless a caller asks for TF32 (pointwise convolutions under conv_allow_tf32()). Which of
// cuBLAS's algorithms runs is timed at a problem's first call (Note [Timed GEMM algorithms] in
// gemm_timed.h).
#include <climits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_timed.h"
#include "kernels/matmul.h"

namespace frugal::kernels::cuda {

void gemm(const Context& ctx, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n,
          int64_t k, const void* a, const void* b, double beta, void* c) {
  gemm_tf32(ctx, dtype, trans_a, trans_b, m, n, k, a, b, beta, c, false);
}

void gemm_tf32(const Context& ctx, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, const void* a, const void* b, double beta, void* c, bool allow_tf32) {
  gemm_tf32_out(ctx, dtype, dtype, trans_a, trans_b, m, n, k, a, b, beta, c, allow_tf32);
}

namespace {

cudaDataType_t cublas_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      FRUGAL_FAIL("gemm: dtype ", dtype, " is not supported on CUDA");
  }
}

}  // namespace

ColumnMajorGemm column_major_gemm(DType dtype, DType c_dtype, bool trans_a, bool trans_b, int64_t m,
                                  int64_t n, int64_t k, const void* a, const void* b, double beta,
                                  void* c, bool allow_tf32) {
  // Column-major view: C'[n, m] = op(B') [n, k] * op(A') [k, m] with C' = c, B' = b, A' = a as
  // stored. b stored [k, n] (or [n, k] when trans_b) reads as column-major [n, k] (or [k, n]).
  ColumnMajorGemm g;
  g.op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.m = static_cast<int>(n), g.n = static_cast<int>(m), g.k = static_cast<int>(k);
  g.a = b, g.lda = static_cast<int>(trans_b ? k : n);
  g.b = a, g.ldb = static_cast<int>(trans_a ? m : k);
  g.c = c, g.ldc = static_cast<int>(n);
  g.type = cublas_type(dtype), g.c_type = cublas_type(c_dtype);
  g.compute = dtype == DType::f32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  g.beta = static_cast<float>(beta);  // beta == 0: c is never read
  return g;
}

void gemm_tf32_out(const Context& ctx, DType dtype, DType c_dtype, bool trans_a, bool trans_b,
                   int64_t m, int64_t n, int64_t k, const void* a, const void* b, double beta,
                   void* c, bool allow_tf32) {
  cudaStream_t s = stream_of(ctx, "gemm");
  FRUGAL_CHECK(dtype != DType::f64, "gemm: f64 is CPU-only");
  FRUGAL_CHECK(c_dtype == dtype || c_dtype == DType::f32, "gemm: ", dtype, " operands give a ",
               dtype, " or f32 result, not ", c_dtype);
  FRUGAL_CHECK(beta == 0.0 || beta == 1.0, "gemm: beta must be 0 or 1, got ", beta);
  FRUGAL_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: negative size m=", m, " n=", n, " k=", k);
  FRUGAL_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "gemm: m=", m, " n=", n, " k=", k,
               " exceed cuBLAS's 32-bit sizes");
  if (m == 0 || n == 0) return;
  DeviceGuard guard(ctx.device);
  if (k == 0) {  // empty sum: c = beta * c
    if (beta == 0.0) {
      CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(m * n) * dtype_size(c_dtype), s));
    }
    return;
  }
  run_gemm(ctx,
           column_major_gemm(dtype, c_dtype, trans_a, trans_b, m, n, k, a, b, beta, c, allow_tf32));
}

}  // namespace frugal::kernels::cuda
