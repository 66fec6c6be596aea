// Shared pieces of the CPU kernels: the one dtype switch and a parallel loop over both cores.
//
// Note [CPU dtypes]: CPU kernels compute in f32 and f64 (gradient checks). f16 and bf16 tensors
// are computed in f32 inside the kernels, never through an f32 copy of the tensor: conv, batch
// norm, activations, binary/affine ops and global pooling widen a row, a block or a GEMM chunk
// into a buffer that stays in cache and narrow the result into the 16-bit output (cpu/widen.h,
// rounding once, so a 16-bit result is the f32 result on the same values, rounded). Two
// exceptions: batch norm reads and writes bf16 where it is stored, converting element by element
// inside its vectorised loops (a shift each way; cpu/widen.h's RowSource and RowSink), and the
// pointwise convs' GEMMs, which oneDNN reads and writes in bf16 itself where it can (Note
// [oneDNN GEMMs] in cpu/onednn_gemm.h, accumulating in f32 and rounding once too); the kernels
// of kernels/math.h and dim_reduce.h convert one element at a time (cpu/typed.h). The few ops
// left (max/avg pool2d, matmul, loss, dropout, sum_to: small tensors in a CNN) still run on an
// f32 copy and round back (detail::cpu_half in core/op_util.h). Strided copies move elements of
// any dtype by size.
#pragma once

#include <omp.h>

#include <cstdint>

#include "base/dtype.h"
#include "base/error.h"

namespace frugal::kernels::cpu {

// Runs `body` with T bound to the C++ type of `dtype` (float or double); throws naming `op`
// for other dtypes.
#define FRUGAL_CPU_FLOAT_SWITCH(dtype, op, ...)                                         \
  switch (dtype) {                                                                      \
    case ::frugal::DType::f32: {                                                        \
      using T = float;                                                                  \
      __VA_ARGS__;                                                                      \
      break;                                                                            \
    }                                                                                   \
    case ::frugal::DType::f64: {                                                        \
      using T = double;                                                                 \
      __VA_ARGS__;                                                                      \
      break;                                                                            \
    }                                                                                   \
    default:                                                                            \
      FRUGAL_FAIL(op, ": dtype ", dtype, " is not computed by CPU kernels (f32, f64)"); \
  }

// Calls fn(begin, end) over [0, n) in chunks across the OpenMP threads; runs inline when the
// work is smaller than `grain` elements so small tensors pay no thread start-up.
template <typename Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  int threads = omp_get_max_threads();
  if (n <= grain || threads <= 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static)
  for (int64_t t = 0; t < chunks; ++t) {
    int64_t begin = n * t / chunks, end = n * (t + 1) / chunks;
    fn(begin, end);
  }
}

}  // namespace frugal::kernels::cpu
