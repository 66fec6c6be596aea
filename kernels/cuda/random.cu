// Counter-based random fills and dropout on CUDA, computing exactly what the CPU computes (see
// Note [Random formulas] in kernels/cpu/random.cpp): the same uniform01 from kernels/random.h,
// the transcendental parts in double, one rounding to f32; f16/bf16 round that f32 value again,
// as the core does for 16-bit tensors on the CPU. No FMA contraction: each operation is written
// with an explicit IEEE intrinsic so the compiler cannot fuse what the CPU may not.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/random.h"

namespace frugal::kernels::cuda {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

template <typename T>
__global__ void uniform_kernel(int64_t n, T* y, uint64_t seed, uint64_t offset, double lo,
                               double hi) {
  const double range = __dsub_rn(hi, lo);
  const T lo_t = from_f<T>(static_cast<float>(lo));
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    double u = uniform01(seed, offset + static_cast<uint64_t>(i));
    // Checked in f32, then again in T: the CPU draws 16-bit tensors in f32 and rounds them.
    float f = static_cast<float>(__dadd_rn(lo, __dmul_rn(range, u)));
    if (static_cast<double>(f) >= hi) f = static_cast<float>(lo);
    const T v = from_f<T>(f);
    y[i] = static_cast<double>(to_f(v)) >= hi ? lo_t : v;  // Note [Uniform draws below hi]
  }
}

template <typename T>
__global__ void normal_kernel(int64_t n, T* y, uint64_t seed, uint64_t offset, double mean,
                              double stddev) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    uint64_t k = offset + 2 * static_cast<uint64_t>(i);
    double u1 = uniform01(seed, k);
    double u2 = uniform01(seed, k + 1);
    double r = sqrt(__dmul_rn(-2.0, log(__dsub_rn(1.0, u1))));
    double z = __dmul_rn(__dmul_rn(stddev, r), cos(__dmul_rn(kTwoPi, u2)));
    y[i] = from_f<T>(static_cast<float>(__dadd_rn(mean, z)));
  }
}

template <typename T>
__global__ void dropout_forward_kernel(int64_t n, const T* x, double p, float scale, uint64_t seed,
                                       uint64_t offset, const uint64_t* offset_base, T* y,
                                       uint8_t* mask) {
  if (offset_base != nullptr) offset += *offset_base;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    bool keep = static_cast<double>(uniform01(seed, offset + static_cast<uint64_t>(i))) >= p;
    if (mask != nullptr) mask[i] = keep ? 1 : 0;
    y[i] = from_f<T>(keep ? __fmul_rn(to_f(x[i]), scale) : 0.0f);
  }
}

template <typename T>
__global__ void dropout_backward_kernel(int64_t n, const T* dy, const uint8_t* mask, float scale,
                                        T* dx) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    dx[i] = from_f<T>(mask[i] != 0 ? __fmul_rn(to_f(dy[i]), scale) : 0.0f);
  }
}

void check_p(double p, const char* op) {
  FRUGAL_CHECK(p >= 0 && p <= 1, op, ": probability ", p, " is outside [0, 1]");
}

}  // namespace

void fill_uniform(const Context& ctx, DType dtype, int64_t n, void* y, uint64_t seed,
                  uint64_t offset, double lo, double hi) {
  cudaStream_t s = stream_of(ctx, "fill_uniform");
  FRUGAL_CHECK(n >= 0, "fill_uniform: negative size ", n);
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "fill_uniform", {
    uniform_kernel<T>
        <<<grid_for(ctx, n), kThreads, 0, s>>>(n, static_cast<T*>(y), seed, offset, lo, hi);
    FRUGAL_LAUNCH_CHECK();
  });
}

void fill_normal(const Context& ctx, DType dtype, int64_t n, void* y, uint64_t seed,
                 uint64_t offset, double mean, double stddev) {
  cudaStream_t s = stream_of(ctx, "fill_normal");
  FRUGAL_CHECK(n >= 0, "fill_normal: negative size ", n);
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "fill_normal", {
    normal_kernel<T>
        <<<grid_for(ctx, n), kThreads, 0, s>>>(n, static_cast<T*>(y), seed, offset, mean, stddev);
    FRUGAL_LAUNCH_CHECK();
  });
}

void dropout_forward(const Context& ctx, DType dtype, int64_t n, const void* x, double p,
                     uint64_t seed, uint64_t offset, const uint64_t* offset_base, void* y,
                     uint8_t* mask) {
  cudaStream_t s = stream_of(ctx, "dropout_forward");
  FRUGAL_CHECK(n >= 0, "dropout_forward: negative size ", n);
  check_p(p, "dropout_forward");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  // The CPU's scale: 1 / (1 - p) in double, rounded to f32 (p == 1 keeps nothing, so the
  // infinite scale is never multiplied).
  auto scale = static_cast<float>(1.0 / (1.0 - p));
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "dropout_forward", {
    dropout_forward_kernel<T><<<grid_for(ctx, n), kThreads, 0, s>>>(
        n, static_cast<const T*>(x), p, scale, seed, offset, offset_base, static_cast<T*>(y), mask);
    FRUGAL_LAUNCH_CHECK();
  });
}

void dropout_backward(const Context& ctx, DType dtype, int64_t n, const void* dy,
                      const uint8_t* mask, double p, void* dx) {
  cudaStream_t s = stream_of(ctx, "dropout_backward");
  FRUGAL_CHECK(n >= 0, "dropout_backward: negative size ", n);
  check_p(p, "dropout_backward");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  auto scale = static_cast<float>(1.0 / (1.0 - p));
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "dropout_backward", {
    dropout_backward_kernel<T><<<grid_for(ctx, n), kThreads, 0, s>>>(
        n, static_cast<const T*>(dy), mask, scale, static_cast<T*>(dx));
    FRUGAL_LAUNCH_CHECK();
  });
}

}  // namespace frugal::kernels::cuda
