// The CUDA side of frugal's one error family: CUDA_CHECK, CUDNN_CHECK, CUBLAS_CHECK all expand
// FRUGAL_GPU_CHECK_GEN, which throws frugal::Error with the statement, file, line, function and
// the library's own error string. FRUGAL_LAUNCH_CHECK() follows every kernel launch;
// *_CHECK_NOTHROW variants only report (for destructors). FRUGAL_CUDA_SYNC=1 in the environment
// synchronises the device after every launch so an asynchronous fault names its kernel.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace frugal::kernels::cuda::detail {

inline const char* error_string(cudaError_t e) { return cudaGetErrorString(e); }
inline const char* error_string(cudnnStatus_t e) { return cudnnGetErrorString(e); }
inline const char* error_string(cublasStatus_t e) { return cublasGetStatusString(e); }

// Throws frugal::Error: "<lib> error <code> (<text>) in `<stmt>` (<func> at <file>:<line>)".
[[noreturn]] void fail_gpu(const char* lib, int code, const char* text, const char* stmt,
                           const char* file, int line, const char* func);
// Prints the same message to stderr and returns (for destructors and teardown).
void warn_gpu(const char* lib, int code, const char* text, const char* stmt, const char* file,
              int line, const char* func) noexcept;
// True when FRUGAL_CUDA_SYNC=1 (read once).
bool sync_after_launch() noexcept;

}  // namespace frugal::kernels::cuda::detail

#define FRUGAL_GPU_CHECK_GEN(lib, ok, stmt, on_error)                                         \
  do {                                                                                        \
    auto frugal_gpu_status_ = (stmt);                                                         \
    if (frugal_gpu_status_ != (ok)) {                                                         \
      ::frugal::kernels::cuda::detail::on_error(                                              \
          lib, static_cast<int>(frugal_gpu_status_),                                          \
          ::frugal::kernels::cuda::detail::error_string(frugal_gpu_status_), #stmt, __FILE__, \
          __LINE__, __func__);                                                                \
    }                                                                                         \
  } while (0)

#define CUDA_CHECK(stmt) FRUGAL_GPU_CHECK_GEN("CUDA", cudaSuccess, stmt, fail_gpu)
#define CUDNN_CHECK(stmt) FRUGAL_GPU_CHECK_GEN("cuDNN", CUDNN_STATUS_SUCCESS, stmt, fail_gpu)
#define CUBLAS_CHECK(stmt) FRUGAL_GPU_CHECK_GEN("cuBLAS", CUBLAS_STATUS_SUCCESS, stmt, fail_gpu)
#define CUDA_CHECK_NOTHROW(stmt) FRUGAL_GPU_CHECK_GEN("CUDA", cudaSuccess, stmt, warn_gpu)
#define CUDNN_CHECK_NOTHROW(stmt) \
  FRUGAL_GPU_CHECK_GEN("cuDNN", CUDNN_STATUS_SUCCESS, stmt, warn_gpu)
#define CUBLAS_CHECK_NOTHROW(stmt) \
  FRUGAL_GPU_CHECK_GEN("cuBLAS", CUBLAS_STATUS_SUCCESS, stmt, warn_gpu)

// After every <<<...>>>: catches bad launch configurations at once and, with FRUGAL_CUDA_SYNC=1,
// faults inside the kernel too.
#define FRUGAL_LAUNCH_CHECK()                                   \
  do {                                                          \
    CUDA_CHECK(cudaGetLastError());                             \
    if (::frugal::kernels::cuda::detail::sync_after_launch()) { \
      CUDA_CHECK(cudaDeviceSynchronize());                      \
    }                                                           \
  } while (0)
