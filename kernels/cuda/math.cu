// CUDA kernels of kernels/math.h: one grid-stride kernel per storage type for the unary ops and
// one for their derivatives (the op is a runtime switch in math_fns, shared with the CPU), one
// broadcasting kernel for maximum/minimum/pow/comparisons and one for their gradients, one for
// comparisons of integers, and a byte-sized where. Compute is in float, integers' exact.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/math.h"
#include "kernels/math_fns.h"

namespace frugal::kernels::cuda {
namespace {

template <typename T>
__global__ void unary_kernel(UnaryOp op, int64_t n, const T* x, float p0, float p1, T* y) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    y[i] = from_f<T>(math_fns::unary(op, to_f(x[i]), p0, p1));
  }
}

template <typename T>
__global__ void unary_backward_kernel(UnaryOp op, int64_t n, const T* s, const T* dy, float p0,
                                      float p1, T* dx) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    dx[i] = from_f<T>(to_f(dy[i]) * math_fns::unary_grad(op, to_f(s[i]), p0, p1));
  }
}

__device__ __forceinline__ void offsets(const Broadcast& bc, int64_t i, int64_t& ia, int64_t& ib) {
  ia = 0;
  ib = 0;
  for (int d = bc.ndim - 1; d >= 0; --d) {
    int64_t q = i / bc.out_dims[d], idx = i - q * bc.out_dims[d];
    i = q;
    ia += idx * bc.a_strides[d];
    ib += idx * bc.b_strides[d];
  }
}

template <typename T>
__global__ void binary_kernel(MathOp op, Broadcast bc, const T* a, const T* b, void* out) {
  const bool cmp = is_comparison(op);
  for (int64_t i = thread_index(); i < bc.numel; i += grid_stride()) {
    int64_t ia, ib;
    offsets(bc, i, ia, ib);
    float r = math_fns::binary(op, to_f(a[ia]), to_f(b[ib]));
    if (cmp) {
      static_cast<uint8_t*>(out)[i] = r != 0.0f ? 1 : 0;
    } else {
      static_cast<T*>(out)[i] = from_f<T>(r);
    }
  }
}

template <typename I>
__global__ void compare_ints_kernel(MathOp op, Broadcast bc, const I* a, const I* b, uint8_t* out) {
  for (int64_t i = thread_index(); i < bc.numel; i += grid_stride()) {
    int64_t ia, ib;
    offsets(bc, i, ia, ib);
    out[i] = math_fns::compare_ints(op, a[ia], b[ib]) ? 1 : 0;
  }
}

template <typename T>
__global__ void binary_backward_kernel(MathOp op, Broadcast bc, const T* a, const T* b, const T* dy,
                                       T* ga, T* gb) {
  for (int64_t i = thread_index(); i < bc.numel; i += grid_stride()) {
    int64_t ia, ib;
    offsets(bc, i, ia, ib);
    float da, db, g = to_f(dy[i]);
    math_fns::binary_grad(op, to_f(a[ia]), to_f(b[ib]), da, db);
    if (ga != nullptr) ga[i] = from_f<T>(g * da);
    if (gb != nullptr) gb[i] = from_f<T>(g * db);
  }
}

template <typename U>
__global__ void where_kernel(int64_t n, const uint8_t* cond, const U* a, const U* b, U* out) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const U* src = cond[i] ? a : b;
    out[i] = src != nullptr ? src[i] : U(0);
  }
}

template <typename U>
void launch_where(const Context& ctx, cudaStream_t s, int64_t n, const uint8_t* cond, const void* a,
                  const void* b, void* out) {
  where_kernel<U><<<grid_for(ctx, n), kThreads, 0, s>>>(
      n, cond, static_cast<const U*>(a), static_cast<const U*>(b), static_cast<U*>(out));
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace

void unary(const Context& ctx, UnaryOp op, DType dtype, int64_t n, const void* x, double p0,
           double p1, void* y) {
  cudaStream_t s = stream_of(ctx, "unary");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "unary", {
    unary_kernel<T><<<grid_for(ctx, n), kThreads, 0, s>>>(
        op, n, static_cast<const T*>(x), static_cast<float>(p0), static_cast<float>(p1),
        static_cast<T*>(y));
    FRUGAL_LAUNCH_CHECK();
  });
}

void unary_backward(const Context& ctx, UnaryOp op, DType dtype, int64_t n, const void* s_in,
                    const void* dy, double p0, double p1, void* dx) {
  cudaStream_t s = stream_of(ctx, "unary_backward");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "unary_backward", {
    unary_backward_kernel<T><<<grid_for(ctx, n), kThreads, 0, s>>>(
        op, n, static_cast<const T*>(s_in), static_cast<const T*>(dy), static_cast<float>(p0),
        static_cast<float>(p1), static_cast<T*>(dx));
    FRUGAL_LAUNCH_CHECK();
  });
}

void binary_math(const Context& ctx, MathOp op, DType dtype, const Broadcast& bc, const void* a,
                 const void* b, void* out) {
  cudaStream_t s = stream_of(ctx, "binary_math");
  if (bc.numel == 0) return;
  DeviceGuard guard(ctx.device);
  if (dtype == DType::i64 || dtype == DType::u8) {
    FRUGAL_CHECK(is_comparison(op), "binary_math: ", dtype, " operands are only compared");
    auto* o = static_cast<uint8_t*>(out);
    if (dtype == DType::i64) {
      compare_ints_kernel<<<grid_for(ctx, bc.numel), kThreads, 0, s>>>(
          op, bc, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), o);
    } else {
      compare_ints_kernel<<<grid_for(ctx, bc.numel), kThreads, 0, s>>>(
          op, bc, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), o);
    }
    FRUGAL_LAUNCH_CHECK();
    return;
  }
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "binary_math", {
    binary_kernel<T><<<grid_for(ctx, bc.numel), kThreads, 0, s>>>(op, bc, static_cast<const T*>(a),
                                                                  static_cast<const T*>(b), out);
    FRUGAL_LAUNCH_CHECK();
  });
}

void binary_math_backward(const Context& ctx, MathOp op, DType dtype, const Broadcast& bc,
                          const void* a, const void* b, const void* dy, void* ga, void* gb) {
  cudaStream_t s = stream_of(ctx, "binary_math_backward");
  FRUGAL_CHECK(!is_comparison(op), "binary_math_backward: comparisons have no gradient");
  if (bc.numel == 0) return;
  DeviceGuard guard(ctx.device);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "binary_math_backward", {
    binary_backward_kernel<T><<<grid_for(ctx, bc.numel), kThreads, 0, s>>>(
        op, bc, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(dy),
        static_cast<T*>(ga), static_cast<T*>(gb));
    FRUGAL_LAUNCH_CHECK();
  });
}

void where(const Context& ctx, size_t elem_size, int64_t n, const uint8_t* cond, const void* a,
           const void* b, void* out) {
  cudaStream_t s = stream_of(ctx, "where");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  switch (elem_size) {
    case 1:
      return launch_where<uint8_t>(ctx, s, n, cond, a, b, out);
    case 2:
      return launch_where<uint16_t>(ctx, s, n, cond, a, b, out);
    case 4:
      return launch_where<uint32_t>(ctx, s, n, cond, a, b, out);
    case 8:
      return launch_where<uint64_t>(ctx, s, n, cond, a, b, out);
  }
  FRUGAL_FAIL("where: element size ", elem_size, " is not 1, 2, 4 or 8");
}

}  // namespace frugal::kernels::cuda
