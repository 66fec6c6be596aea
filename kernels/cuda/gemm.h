// The row-major cuBLAS GEMM behind kernels::cuda::gemm, with a switch for TF32 in f32: the
// pointwise convolutions of conv.cu run on it and follow conv_allow_tf32() as cuDNN's do.
#pragma once

#include "kernels/context.h"
#include "kernels/cuda/gemm_timed.h"

namespace frugal::kernels::cuda {

// c[m, n] = op(a) op(b) (+ c when beta == 1); see kernels/matmul.h for the operand layouts.
void gemm_tf32(const Context& ctx, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, const void* a, const void* b, double beta, void* c, bool allow_tf32);

// gemm_tf32 with c stored in c_dtype: dtype, or f32 for 16-bit a and b (cuBLAS accumulates in
// f32 either way; the pointwise weight gradients of autocast are wanted in f32).
void gemm_tf32_out(const Context& ctx, DType dtype, DType c_dtype, bool trans_a, bool trans_b,
                   int64_t m, int64_t n, int64_t k, const void* a, const void* b, double beta,
                   void* c, bool allow_tf32);

// The column-major cuBLAS call that gemm_tf32_out makes of its row-major arguments (checked by
// gemm_tf32_out, not here): for tests of the timed candidates (gemm_timed.h).
ColumnMajorGemm column_major_gemm(DType dtype, DType c_dtype, bool trans_a, bool trans_b, int64_t m,
                                  int64_t n, int64_t k, const void* a, const void* b, double beta,
                                  void* c, bool allow_tf32);

}  // namespace frugal::kernels::cuda
