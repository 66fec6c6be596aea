// Row-major GEMMs through oneDNN's matmul (Note [oneDNN GEMMs]): the pointwise convs and
// the matmul op call it first and run their Eigen code when it declines.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/context.h"

namespace frugal::kernels::cpu {

// Note [oneDNN GEMMs]: Eigen's GEMM packs and multiplies in f32 only, so a bf16 product had to
// be widened into f32 buffers first and ran no faster than f32 (0.86x at best, with the
// conversions on top). oneDNN multiplies bf16 with AVX512-BF16's dot products (two products
// per f32 lane), reads and writes 16-bit tensors directly and rounds once, and its f32 kernels
// also beat Eigen's by 1.6-6x on the thin matrices of pointwise convs (16384x16 by 16x96 in
// MobileNetV2 at 32x32). It is optional: without it (or with FRUGAL_ONEDNN=0, or where
// oneDNN has only its reference implementation for the dtypes, as for bf16 without AVX512 or
// f16 without AVX512-FP16) every caller keeps its Eigen path. Its scratchpad comes from the
// context's workspace, so the memory tools count it like any kernel's workspace; results are
// the same from run to run for a given thread count (no atomics in its CPU matmul).

// One operand as the product sees it, rows x cols: element (i, j) at data[i * ld + j], or at
// data[j * ld + i] when transposed (a stored [cols, rows] matrix read transposed).
struct GemmOperand {
  const void* data;
  DType dtype;
  int64_t ld;
  bool transposed = false;
};

// c[m, n] = a[m, k] * b[k, n] (+ bias[n], in f32) (+ c itself when accumulate), c of c_dtype
// with leading dimension ldc, accumulated in f32 and rounded once into c. Returns false and
// touches nothing when oneDNN declines (see the note); the caller then computes it itself.
bool onednn_gemm(const Context& ctx, int64_t m, int64_t n, int64_t k, const GemmOperand& a,
                 const GemmOperand& b, void* c, DType c_dtype, int64_t ldc,
                 const float* bias = nullptr, bool accumulate = false);

}  // namespace frugal::kernels::cpu
