// Row-major GEMM through cuBLAS: a row-major [m, n] result is the column-major [n, m] product
// b^T a^T, so the operands swap places and no data moves. f16/bf16 run on tensor cores with f32
// accumulation (CUBLAS_COMPUTE_32F); f32 stays IEEE f32 (the handle's math mode allows no TF32)
// unless a caller asks for TF32 (pointwise convolutions under conv_allow_tf32()).
#include <climits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm.h"
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
  const cudaDataType_t type = cublas_type(dtype), c_type = cublas_type(c_dtype);
  // Column-major view: C'[n, m] = op(B') [n, k] * op(A') [k, m] with C' = c, B' = b, A' = a as
  // stored. b stored [k, n] (or [n, k] when trans_b) reads as column-major [n, k] (or [k, n]).
  cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto ldb = static_cast<int>(trans_b ? k : n);
  auto lda = static_cast<int>(trans_a ? m : k);
  auto ldc = static_cast<int>(n);
  float alpha_f = 1.0f, beta_f = static_cast<float>(beta);  // beta == 0: c is never read
  CUBLAS_CHECK(cublasGemmEx(
      cublas_handle(ctx), op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
      &alpha_f, b, type, ldb, a, type, lda, &beta_f, c, c_type, ldc,
      dtype == DType::f32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace frugal::kernels::cuda
