// CUDA return-code checks for memory/ (which sits below kernels/ and cannot use its macros):
// the same FRUGAL_GPU_CHECK_GEN as kernels/cuda/check.h (base/gpu_check.h), so a failed call
// throws frugal::Error naming the call, the CUDA error and where it happened.
#pragma once

#include <cuda_runtime.h>

#include "base/gpu_check.h"

#define FRUGAL_MEMORY_CUDA_CHECK(call) \
  FRUGAL_GPU_CHECK_GEN("CUDA", cudaSuccess, call, cudaGetErrorString, fail_gpu)

// For destructors and noexcept paths: reports the failure on stderr instead of throwing.
#define FRUGAL_MEMORY_CUDA_WARN(call) \
  FRUGAL_GPU_CHECK_GEN("CUDA", cudaSuccess, call, cudaGetErrorString, warn_gpu)
