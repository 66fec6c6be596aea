// Host-side plumbing shared by the CUDA kernels: the current-device guard, the stream of a
// context, device properties and the cuBLAS/cuDNN handles (one per device and thread, bound to
// the stream of the call). Defined in runtime.cpp.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/context.h"
#include "kernels/matmul.h"

namespace frugal::kernels::cuda {

// Makes `device` current for the scope and restores the previous device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// ctx.stream, or the device's compute stream when the context carries none. Checks that ctx is
// a CUDA context, naming `op` otherwise.
cudaStream_t stream_of(const Context& ctx, const char* op);
int sm_count(int device);       // multiprocessors of `device`, read once
int compute_major(int device);  // its compute capability's major number (9 on the H200), likewise
// Blocks of `kernel` (a __global__ function) at `threads` a block that one multiprocessor of
// `device` holds at once, given its registers and static shared memory; at least 1, read once
// per (device, kernel, threads). Grid-stride kernels size their grids by it: a grid sized for
// more resident blocks than fit runs a partial last wave (Note [Grids by occupancy] in
// kernels/cuda/cuda_common.cuh).
int resident_blocks(int device, const void* kernel, int threads);

// Handles of the calling thread for ctx.device, bound to stream_of(ctx). cuBLAS gets its
// workspace from the device allocator (kCublasWorkspaceBytes), never from cudaMalloc.
cublasHandle_t cublas_handle(const Context& ctx);
cudnnHandle_t cudnn_handle(const Context& ctx);
// cuBLASLt's handle of the calling thread for `device` (not bound to a stream: each
// cublasLtMatmul names its own), and the cuBLAS workspace of kCublasWorkspaceBytes that
// cublas_handle gives its handle, which cuBLASLt calls on the same stream share.
cublasLtHandle_t cublas_lt_handle(Device device);
void* cublas_workspace(Device device);

}  // namespace frugal::kernels::cuda
