// The CUDA side of frugal's one error family: CUDA_CHECK, CUDNN_CHECK, CUBLAS_CHECK all expand
// FRUGAL_GPU_CHECK_GEN (base/gpu_check.h, shared with memory/cuda), which throws frugal::Error
// with the statement, file, line, function and the library's own error string.
// FRUGAL_LAUNCH_CHECK() follows every kernel launch; *_CHECK_NOTHROW variants only report (for
// destructors). FRUGAL_CUDA_SYNC=1 in the environment synchronises the device after every launch
// so an asynchronous fault names its kernel.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "base/gpu_check.h"

namespace frugal::kernels::cuda::detail {

inline const char* error_string(cudaError_t e) { return cudaGetErrorString(e); }
inline const char* error_string(cudnnStatus_t e) { return cudnnGetErrorString(e); }
inline const char* error_string(cublasStatus_t e) { return cublasGetStatusString(e); }

// True when FRUGAL_CUDA_SYNC=1 (read once).
bool sync_after_launch() noexcept;

}  // namespace frugal::kernels::cuda::detail

// The library's error string of a status, for FRUGAL_GPU_CHECK_GEN's text.
#define FRUGAL_GPU_TEXT ::frugal::kernels::cuda::detail::error_string

#define CUDA_CHECK(stmt) FRUGAL_GPU_CHECK_GEN("CUDA", cudaSuccess, stmt, FRUGAL_GPU_TEXT, fail_gpu)
#define CUDNN_CHECK(stmt) \
  FRUGAL_GPU_CHECK_GEN("cuDNN", CUDNN_STATUS_SUCCESS, stmt, FRUGAL_GPU_TEXT, fail_gpu)
#define CUBLAS_CHECK(stmt) \
  FRUGAL_GPU_CHECK_GEN("cuBLAS", CUBLAS_STATUS_SUCCESS, stmt, FRUGAL_GPU_TEXT, fail_gpu)
#define CUDA_CHECK_NOTHROW(stmt) \
  FRUGAL_GPU_CHECK_GEN("CUDA", cudaSuccess, stmt, FRUGAL_GPU_TEXT, warn_gpu)
#define CUDNN_CHECK_NOTHROW(stmt) \
  FRUGAL_GPU_CHECK_GEN("cuDNN", CUDNN_STATUS_SUCCESS, stmt, FRUGAL_GPU_TEXT, warn_gpu)
#define CUBLAS_CHECK_NOTHROW(stmt) \
  FRUGAL_GPU_CHECK_GEN("cuBLAS", CUBLAS_STATUS_SUCCESS, stmt, FRUGAL_GPU_TEXT, warn_gpu)

// After every <<<...>>>: catches bad launch configurations at once and, with FRUGAL_CUDA_SYNC=1,
// faults inside the kernel too.
#define FRUGAL_LAUNCH_CHECK()                                   \
  do {                                                          \
    CUDA_CHECK(cudaGetLastError());                             \
    if (::frugal::kernels::cuda::detail::sync_after_launch()) { \
      CUDA_CHECK(cudaDeviceSynchronize());                      \
    }                                                           \
  } while (0)
