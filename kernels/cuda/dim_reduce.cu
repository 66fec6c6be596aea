// CUDA kernels of kernels/dim_reduce.h: one forward and one backward kernel per storage type,
// the op a runtime switch. A line along the reduced dimension is read by a whole warp when the
// dimension is innermost (inner == 1: softmax over classes, contiguous reads), else by one
// thread, neighbouring threads taking neighbouring inner positions (coalesced).
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/dim_reduce.h"

namespace frugal::kernels::cuda {
namespace {

// Line `line` and lane within it, for `lanes` (1 or 32) threads per line.
struct LineWalk {
  int lanes;
  __device__ int64_t first_line() const { return thread_index() / lanes; }
  __device__ int64_t line_stride() const { return grid_stride() / lanes; }
  __device__ int lane() const { return lanes == 1 ? 0 : static_cast<int>(threadIdx.x & 31); }
  __device__ float sum(float v) const { return lanes == 1 ? v : warp_sum(v); }
  __device__ float max(float v) const { return lanes == 1 ? v : warp_max(v); }
};

// (value, index) of the first maximum, NaN counting as the maximum.
__device__ __forceinline__ void better(float& bv, int64_t& bi, float v, int64_t i) {
  bool bn = isnan(bv), vn = isnan(v);
  if (bn != vn ? vn : (v > bv || (v == bv && i < bi) || (bn && i < bi))) {
    bv = v;
    bi = i;
  }
}

template <typename T>
__global__ void dim_forward_kernel(DimOp op, DimView v, LineWalk w, const T* x, void* y) {
  const int64_t lines = v.outer * v.inner;
  for (int64_t l = w.first_line(); l < lines; l += w.line_stride()) {
    const int64_t o = l / v.inner, origin = o * v.size * v.inner + (l - o * v.inner);
    const T* xl = x + origin;
    if (op == DimOp::amax || op == DimOp::argmax) {
      float bv = -INFINITY;
      int64_t bi = v.size;  // beaten by any element
      for (int64_t j = w.lane(); j < v.size; j += w.lanes) better(bv, bi, to_f(xl[j * v.inner]), j);
      if (w.lanes > 1) {
        for (int off = 16; off > 0; off >>= 1) {
          float ov = __shfl_xor_sync(0xffffffffu, bv, off);
          int64_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
          better(bv, bi, ov, oi);
        }
      }
      if (w.lane() == 0) {
        if (op == DimOp::amax) {
          static_cast<T*>(y)[l] = from_f<T>(bv);
        } else {
          static_cast<int64_t*>(y)[l] = bi;
        }
      }
      continue;
    }
    float m = -INFINITY;
    for (int64_t j = w.lane(); j < v.size; j += w.lanes) m = fmaxf(m, to_f(xl[j * v.inner]));
    m = w.max(m);
    float total = 0.0f;
    for (int64_t j = w.lane(); j < v.size; j += w.lanes) total += expf(to_f(xl[j * v.inner]) - m);
    total = w.sum(total);
    const float lse = m + logf(total);
    T* yl = static_cast<T*>(y) + origin;
    for (int64_t j = w.lane(); j < v.size; j += w.lanes) {
      float xv = to_f(xl[j * v.inner]);
      yl[j * v.inner] = from_f<T>(op == DimOp::softmax ? expf(xv - m) / total : xv - lse);
    }
  }
}

template <typename T>
__global__ void dim_backward_kernel(DimOp op, DimView v, LineWalk w, const T* x, const T* y,
                                    const T* dy, T* dx) {
  const int64_t lines = v.outer * v.inner;
  for (int64_t l = w.first_line(); l < lines; l += w.line_stride()) {
    const int64_t o = l / v.inner, origin = o * v.size * v.inner + (l - o * v.inner);
    T* dxl = dx + origin;
    if (op == DimOp::amax) {
      const T* xl = x + origin;
      const float m = to_f(y[l]), g = to_f(dy[l]);
      float count = 0.0f;
      for (int64_t j = w.lane(); j < v.size; j += w.lanes) count += to_f(xl[j * v.inner]) == m;
      count = w.sum(count);
      const float share = count > 0.0f ? g / count : 0.0f;
      for (int64_t j = w.lane(); j < v.size; j += w.lanes) {
        dxl[j * v.inner] = from_f<T>(to_f(xl[j * v.inner]) == m ? share : 0.0f);
      }
      continue;
    }
    const T *yl = y + origin, *dyl = dy + origin;
    float dot = 0.0f;
    for (int64_t j = w.lane(); j < v.size; j += w.lanes) {
      float g = to_f(dyl[j * v.inner]);
      dot += op == DimOp::softmax ? g * to_f(yl[j * v.inner]) : g;
    }
    dot = w.sum(dot);
    for (int64_t j = w.lane(); j < v.size; j += w.lanes) {
      float g = to_f(dyl[j * v.inner]), yv = to_f(yl[j * v.inner]);
      dxl[j * v.inner] = from_f<T>(op == DimOp::softmax ? yv * (g - dot) : g - expf(yv) * dot);
    }
  }
}

LineWalk walk_for(const DimView& v) { return LineWalk{v.inner == 1 && v.size > 1 ? 32 : 1}; }

}  // namespace

void dim_reduce(const Context& ctx, DimOp op, DType dtype, const DimView& v, const void* x,
                void* y) {
  cudaStream_t s = stream_of(ctx, "dim_reduce");
  FRUGAL_CHECK(v.size > 0 || op == DimOp::softmax || op == DimOp::log_softmax,
               "dim_reduce: cannot reduce an empty dimension");
  if (v.outer * v.inner * v.size == 0) return;
  DeviceGuard guard(ctx.device);
  LineWalk w = walk_for(v);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "dim_reduce", {
    dim_forward_kernel<T><<<grid_for(ctx, v.outer * v.inner * w.lanes), kThreads, 0, s>>>(
        op, v, w, static_cast<const T*>(x), y);
    FRUGAL_LAUNCH_CHECK();
  });
}

void dim_reduce_backward(const Context& ctx, DimOp op, DType dtype, const DimView& v, const void* x,
                         const void* y, const void* dy, void* dx) {
  cudaStream_t s = stream_of(ctx, "dim_reduce_backward");
  FRUGAL_CHECK(op != DimOp::argmax, "dim_reduce_backward: argmax has no gradient");
  if (v.outer * v.inner * v.size == 0) return;
  DeviceGuard guard(ctx.device);
  LineWalk w = walk_for(v);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "dim_reduce_backward", {
    dim_backward_kernel<T><<<grid_for(ctx, v.outer * v.inner * w.lanes), kThreads, 0, s>>>(
        op, v, w, static_cast<const T*>(x), static_cast<const T*>(y), static_cast<const T*>(dy),
        static_cast<T*>(dx));
    FRUGAL_LAUNCH_CHECK();
  });
}

}  // namespace frugal::kernels::cuda
