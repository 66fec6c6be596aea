// CUDA loss-scaling kernels (kernels/amp.h), term by term as the CPU twins in kernels/cpu/amp.cpp.
// Every flag and scalar is read on the device, so a step needs no host synchronisation.
#include <cmath>

#include "kernels/amp.h"
#include "kernels/cuda/cuda_common.cuh"

namespace frugal::kernels::cuda {
namespace {

__global__ void unscale_and_check_kernel(int64_t n, float* grad, const float* scale,
                                         float* found_inf) {
  const float inv = 1.0f / *scale;
  bool bad = false;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const float g = grad[i];
    bad = bad || !isfinite(g);
    grad[i] = g * inv;
  }
  // Any thread that saw a non-finite value writes the same 1: no atomic needed.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

// Note [Multi-tensor lists] in cuda_common.cuh (644 bytes of parameters).
struct GradList {
  float* ptr[kListMax];
  int64_t n[kListMax];
  ListBlocks blocks;
};

__global__ void unscale_and_check_many_kernel(GradList list, const float* scale, float* found_inf) {
  const ListSlice at = list_slice(list.blocks);
  float* grad = list.ptr[at.t];
  const int64_t n = list.n[at.t];
  const float inv = 1.0f / *scale;
  bool bad = false;
  for (int64_t i = at.begin; i < n; i += at.stride) {
    const float g = grad[i];
    bad = bad || !isfinite(g);
    grad[i] = g * inv;
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

struct LowerList {
  const float* src[kListMax];
  void* dst[kListMax];
  int64_t n[kListMax];
  ListBlocks blocks;
};

template <typename T>
__global__ void lower_many_kernel(LowerList list) {
  const ListSlice at = list_slice(list.blocks);
  const float* src = list.src[at.t];
  T* dst = static_cast<T*>(list.dst[at.t]);
  const int64_t n = list.n[at.t];
  for (int64_t i = at.begin; i < n; i += at.stride) dst[i] = from_f<T>(src[i]);
}

__global__ void update_scale_kernel(float* scale, float* growth_tracker, const float* found_inf,
                                    double growth, double backoff, int64_t interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(*scale * backoff);
    *growth_tracker = 0.0f;
    return;
  }
  const float successful = *growth_tracker + 1.0f;
  if (successful >= static_cast<float>(interval)) {
    const float grown = static_cast<float>(*scale * growth);
    if (isfinite(grown)) *scale = grown;
    *growth_tracker = 0.0f;
  } else {
    *growth_tracker = successful;
  }
}

__global__ void count_step_kernel(float* step, const float* found_inf) {
  if (found_inf == nullptr || *found_inf == 0.0f) *step += 1.0f;
}

}  // namespace

void unscale_and_check(const Context& ctx, int64_t n, float* grad, const float* scale,
                       float* found_inf) {
  cudaStream_t s = stream_of(ctx, "unscale_and_check");
  FRUGAL_CHECK(n >= 0, "unscale_and_check: negative size ", n);
  FRUGAL_CHECK(scale != nullptr && found_inf != nullptr,
               "unscale_and_check: scale and found_inf must be given");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  unscale_and_check_kernel<<<grid_for(ctx, n), kThreads, 0, s>>>(n, grad, scale, found_inf);
  FRUGAL_LAUNCH_CHECK();
}

void unscale_and_check_many(const Context& ctx, int64_t count, float* const* grads,
                            const int64_t* sizes, const float* scale, float* found_inf) {
  const char* op = "unscale_and_check_many";
  cudaStream_t s = stream_of(ctx, op);
  FRUGAL_CHECK(scale != nullptr && found_inf != nullptr, op, ": scale and found_inf must be given");
  DeviceGuard guard(ctx.device);
  for_each_tensor_list<GradList>(
      ctx, op, count, sizes,
      [&](GradList& list, int slot, int64_t t) { list.ptr[slot] = grads[t]; },
      [&](const GradList& list, unsigned blocks) {
        unscale_and_check_many_kernel<<<blocks, kThreads, 0, s>>>(list, scale, found_inf);
      });
}

void lower_many(const Context& ctx, DType to, int64_t count, const float* const* srcs,
                void* const* dsts, const int64_t* sizes) {
  const char* op = "lower_many";
  cudaStream_t s = stream_of(ctx, op);
  FRUGAL_CHECK(is_low_precision(to), op, ": target must be f16 or bf16, got ", to);
  DeviceGuard guard(ctx.device);
  for_each_tensor_list<LowerList>(
      ctx, op, count, sizes,
      [&](LowerList& list, int slot, int64_t t) {
        list.src[slot] = srcs[t];
        list.dst[slot] = dsts[t];
      },
      [&](const LowerList& list, unsigned blocks) {
        if (to == DType::f16) {
          lower_many_kernel<__half><<<blocks, kThreads, 0, s>>>(list);
        } else {
          lower_many_kernel<__nv_bfloat16><<<blocks, kThreads, 0, s>>>(list);
        }
      });
}

void update_scale(const Context& ctx, float* scale, float* growth_tracker, const float* found_inf,
                  double growth_factor, double backoff_factor, int64_t growth_interval) {
  cudaStream_t s = stream_of(ctx, "update_scale");
  FRUGAL_CHECK(growth_interval > 0, "update_scale: growth_interval must be > 0, got ",
               growth_interval);
  FRUGAL_CHECK(found_inf != nullptr, "update_scale: found_inf must be given");
  DeviceGuard guard(ctx.device);
  update_scale_kernel<<<1, 1, 0, s>>>(scale, growth_tracker, found_inf, growth_factor,
                                      backoff_factor, growth_interval);
  FRUGAL_LAUNCH_CHECK();
}

void count_step(const Context& ctx, float* step, const float* found_inf) {
  cudaStream_t s = stream_of(ctx, "count_step");
  DeviceGuard guard(ctx.device);
  count_step_kernel<<<1, 1, 0, s>>>(step, found_inf);
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace frugal::kernels::cuda
