// The one check family for GPU libraries' return codes (STYLE point 8): FRUGAL_GPU_CHECK_GEN is
// what kernels/cuda/check.h's CUDA_CHECK, CUDNN_CHECK and CUBLAS_CHECK and memory/cuda's
// FRUGAL_MEMORY_CUDA_CHECK expand, so every failed call reads the same: "<lib> error <code>
// (<text>) in `<stmt>` (<func> at <file>:<line>)". Here in base/ so that memory/, below
// kernels/, uses it too; it names no GPU library itself.
#pragma once

namespace frugal::detail {

// Throws frugal::Error with the message above.
[[noreturn]] void fail_gpu(const char* lib, int code, const char* text, const char* stmt,
                           const char* file, int line, const char* func);
// Prints the same message to stderr and returns (for destructors and teardown).
void warn_gpu(const char* lib, int code, const char* text, const char* stmt, const char* file,
              int line, const char* func) noexcept;

}  // namespace frugal::detail

// `stmt` returns a status; unless it equals `ok`, calls ::frugal::detail::on_error (fail_gpu or
// warn_gpu) with the status, text_of(status) as its text, the statement and where it stands.
#define FRUGAL_GPU_CHECK_GEN(lib, ok, stmt, text_of, on_error)                           \
  do {                                                                                   \
    auto frugal_gpu_status_ = (stmt);                                                    \
    if (frugal_gpu_status_ != (ok)) {                                                    \
      ::frugal::detail::on_error(lib, static_cast<int>(frugal_gpu_status_),              \
                                 text_of(frugal_gpu_status_), #stmt, __FILE__, __LINE__, \
                                 __func__);                                              \
    }                                                                                    \
  } while (0)
