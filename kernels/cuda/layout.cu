// CUDA strided copy (kernels/layout.h): one grid-stride kernel per element size; each thread
// turns its flat index into source and destination offsets.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/layout.h"

namespace frugal::kernels::cuda {
namespace {

template <typename U>
__global__ void strided_copy_kernel(StridedCopy c, const U* src, U* dst) {
  for (int64_t i = thread_index(); i < c.numel; i += grid_stride()) {
    int64_t r = i, so = 0, dof = 0;
    for (int d = c.ndim - 1; d >= 0; --d) {
      int64_t q = r / c.dims[d], idx = r - q * c.dims[d];
      r = q;
      so += idx * c.src_strides[d];
      dof += idx * c.dst_strides[d];
    }
    dst[dof] = src[so];
  }
}

template <typename U>
void launch(const Context& ctx, cudaStream_t s, const StridedCopy& c, const void* src, void* dst) {
  strided_copy_kernel<U><<<grid_for(ctx, c.numel), kThreads, 0, s>>>(c, static_cast<const U*>(src),
                                                                     static_cast<U*>(dst));
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace

void strided_copy(const Context& ctx, size_t elem_size, const StridedCopy& c, const void* src,
                  void* dst) {
  cudaStream_t s = stream_of(ctx, "strided_copy");
  FRUGAL_CHECK(c.ndim >= 1 && c.ndim <= kMaxDims, "strided_copy: bad rank ", c.ndim);
  if (c.numel == 0) return;
  DeviceGuard guard(ctx.device);
  switch (elem_size) {
    case 1:
      return launch<uint8_t>(ctx, s, c, src, dst);
    case 2:
      return launch<uint16_t>(ctx, s, c, src, dst);
    case 4:
      return launch<uint32_t>(ctx, s, c, src, dst);
    case 8:
      return launch<uint64_t>(ctx, s, c, src, dst);
  }
  FRUGAL_FAIL("strided_copy: element size ", elem_size, " is not 1, 2, 4 or 8");
}

}  // namespace frugal::kernels::cuda
