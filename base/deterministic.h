// Deterministic mode: two runs of the same program with the same seed compute bit-identical
// results on the same machine, whatever the timing (sanitizers, other work on the device).
//
//   frugal::set_deterministic(true);  // or FRUGAL_DETERMINISTIC=1, or `train --deterministic`
//   frugal::DeterministicGuard on;    // for a scope; the mode before it comes back after it
//
// Note [Deterministic mode]
// What can make two runs differ, and what this mode does about it:
// - cuDNN convolutions (kernels/cuda/conv.cu): by default the first call of a configuration
//   times several algorithms and keeps the fastest, and some algorithms sum with atomics. In
//   deterministic mode nothing is timed: the algorithm is the first of cuDNN's heuristic list
//   (cudnnGet*Algorithm_v7, which does not time) that cuDNN marks CUDNN_DETERMINISTIC.
// - frugal's own CUDA kernels use no floating-point atomics: reductions (sum_to, batch norm
//   statistics, depthwise and few-channel weight gradients) write partial sums per block and add
//   them in a fixed order, in every mode.
// - cuBLAS: by default the first call of a GEMM problem times cuBLASLt's algorithms and keeps
//   the fastest (Note [Timed GEMM algorithms] in kernels/cuda/gemm_timed.h); in deterministic
//   mode nothing is timed and every GEMM runs cublasGemmEx's own pick. A handle per device and
//   thread, bound to one stream with a fixed workspace, and atomics left off
//   (CUBLAS_ATOMICS_NOT_ALLOWED, cuBLAS's default), so a GEMM gives the same bits on every run
//   of one GPU model.
// - CPU kernels: OpenMP loops are schedule(static) over a chunk count fixed by the thread count,
//   and reductions keep one partial per chunk added in order (kernels/cpu/chunks.h): no
//   reduction() clauses; deterministic in every mode for a given OMP_NUM_THREADS.
// - data: the DataLoader's order and augmentations depend only on its seed and the epoch.
// Results still differ between GPU models, library versions and thread counts.
#pragma once

namespace frugal {

void set_deterministic(bool on);
bool deterministic();  // starts as FRUGAL_DETERMINISTIC=1 in the environment says

// Sets the mode for a scope and restores the one before it.
class DeterministicGuard {
 public:
  explicit DeterministicGuard(bool on = true) : previous_(deterministic()) {
    set_deterministic(on);
  }
  ~DeterministicGuard() { set_deterministic(previous_); }
  DeterministicGuard(const DeterministicGuard&) = delete;
  DeterministicGuard& operator=(const DeterministicGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace frugal
