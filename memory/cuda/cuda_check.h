// CUDA return-code checks for memory/ (which sits below kernels/ and cannot use its macros):
// a failed call throws frugal::Error naming the call, the CUDA error and where it happened.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

#include "base/error.h"

#define FRUGAL_MEMORY_CUDA_CHECK(call)                                                       \
  do {                                                                                       \
    const cudaError_t frugal_err_ = (call);                                                  \
    if (frugal_err_ != cudaSuccess) {                                                        \
      ::frugal::detail::fail<::frugal::Error>(                                               \
          __FILE__, __LINE__, __func__, "",                                                  \
          ::frugal::detail::str("CUDA error in ", #call, ": ", cudaGetErrorName(frugal_err_), \
                                " (", cudaGetErrorString(frugal_err_), ")"));                \
    }                                                                                        \
  } while (0)

// For destructors and noexcept paths: reports the failure on stderr instead of throwing.
#define FRUGAL_MEMORY_CUDA_WARN(call)                                                         \
  do {                                                                                        \
    const cudaError_t frugal_err_ = (call);                                                   \
    if (frugal_err_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "frugal: CUDA error in %s: %s (%s) at %s:%d\n", #call,             \
                   cudaGetErrorName(frugal_err_), cudaGetErrorString(frugal_err_), __FILE__, \
                   __LINE__);                                                                 \
    }                                                                                         \
  } while (0)
