// Dense matrix products on row-major contiguous matrices (Eigen on the CPU, cuBLAS on CUDA with
// f32 accumulation; tensor cores for f16/bf16).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/context.h"

namespace frugal::kernels {

// The workspace frugal gives cuBLAS on each device (per thread), from the device allocator, made
// on the first product and kept: PyTorch's default on Hopper. Memory estimates for CUDA count it.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// c[m, n] = op(a) @ op(b) + beta * c, where op(a) is [m, k] (a stored [k, m] when trans_a),
// op(b) is [k, n] (b stored [n, k] when trans_b). beta is 0 (overwrite) or 1 (accumulate).
FRUGAL_DECLARE_KERNEL(gemm,
                      (const Context& ctx, DType dtype, bool trans_a, bool trans_b, int64_t m,
                       int64_t n, int64_t k, const void* a, const void* b, double beta, void* c),
                      (ctx, dtype, trans_a, trans_b, m, n, k, a, b, beta, c))

}  // namespace frugal::kernels
