// One cuBLAS GEMM with the algorithm timed for its problem (Note [Timed GEMM algorithms]): the
// column-major call behind kernels::cuda::gemm_tf32_out (matmul.cu).
//
// Note [Timed GEMM algorithms]: cublasGemmEx with CUBLAS_GEMM_DEFAULT runs cuBLAS's first heuristic
// pick, untimed. For MobileNetV2's pointwise convolutions that pick is up to 1.5x slower than the
// fastest of cuBLASLt's candidates on the 14x14 and 7x7 layers, and cuBLASLt's own first pick
// differs from GemmEx's on the 112x112 ones (bench/gemm_algo_probe.cu; H200, session 34: 2,003 us
// for the step's 102 GEMMs, 1,918 us at the fastest candidate of each). So, as the convolutions do
// (Note [Conv algorithm cache] in conv.cu), the first call of each problem times GemmEx's pick
// beside cuBLASLt's first kTimedGemmCandidates heuristic results by their device time alone (warmed
// up once, then run back to back behind a stream hold, Note [Timing device work alone] in
// device_timing.h), caches the fastest, and reruns it, so that the call's output is the chosen
// algorithm's, as every later call's is. In MobileNetV2's f16 step (batch 128, 224x224, H200,
// session 37) cuBLASLt's candidates win 53 of the 60 problems, the GEMMs take 0.94x their time at
// GemmEx's pick, and the replayed step gains 0.8% (EfficientNet-B0 and MobileNetV1 0.7%;
// bench/RESULTS.md). A problem is its shapes, transposes, types, compute type, leading dimensions
// and the alignment its pointers share (up to 256 bytes; cuBLASLt's candidates are asked for that
// alignment). The candidates get the cuBLAS workspace the handle already holds
// (kCublasWorkspaceBytes), so timing adds no memory.
// Not timed, and run by GemmEx as before: deterministic mode (timing would make runs differ;
// Note [Deterministic mode]), FRUGAL_CUDNN_BENCHMARK=0, beta = 1 (a timed candidate would add
// into c once a run), and a first call while the stream is being captured into a CUDA graph
// (nothing can be timed there; the problem is timed at its first call outside a capture).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/context.h"

namespace frugal::kernels::cuda {

// cuBLASLt's heuristic results timed beside GemmEx's pick at a problem's first call.
constexpr int kTimedGemmCandidates = 16;

// c = op_a(a) op_b(b) (+ c when beta == 1), all column-major, as cublasGemmEx takes it.
struct ColumnMajorGemm {
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* c = nullptr;
  int ldc = 0;
  cudaDataType_t type = CUDA_R_32F, c_type = CUDA_R_32F;  // of a and b; of c
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  float beta = 0.0f;  // 0 or 1
};

// Runs g on ctx's stream with its timed algorithm (Note [Timed GEMM algorithms]).
void run_gemm(const Context& ctx, const ColumnMajorGemm& g);

// For tests: runs g with cuBLASLt's `index`-th heuristic candidate (0-based), untimed and
// uncached; false when cuBLASLt offers fewer candidates. The timed path runs the same candidates.
bool run_gemm_candidate(const Context& ctx, const ColumnMajorGemm& g, int index);

// What the cache holds for g's problem: "gemm_ex", "lt <algorithm>", or "" when g's problem has
// not been timed. For tests and FRUGAL_CUDNN_LOG=1.
std::string timed_gemm_choice(const Context& ctx, const ColumnMajorGemm& g);

// Forgets the GEMM algorithms timed so far: the next call of each problem times again.
void forget_gemm_algorithms();

}  // namespace frugal::kernels::cuda
