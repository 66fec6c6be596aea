// Note [Stride-2 stems as stride-1 convolutions] (kernels/space_to_depth.h): the rewrites of x, w
// and dw, with the index arithmetic the CPU test checks (z_source, w2_source).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/space_to_depth_conv.h"

namespace frugal::kernels::cuda {
namespace {

constexpr int kChannelsPerThread = 8;  // one 16-byte store of z: inner.c is a multiple of 8

// The integers every kernel here decodes its index with.
struct Rewrite {
  int c, h, w, kh, kw, pad_h, pad_w, row_first, col_first;  // s, and r's offsets
  int zh, zw, zc, taps_h, taps_w;                           // r.inner
};

Rewrite rewrite_of(const Conv2dShape& s, const SpaceToDepth& r) {
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return {i(s.c),       i(s.h),       i(s.w),         i(s.kh),        i(s.kw),
          i(s.pad_h),   i(s.pad_w),   i(r.row_first), i(r.col_first), i(r.inner.h),
          i(r.inner.w), i(r.inner.c), i(r.inner.kh),  i(r.inner.kw)};
}

// One thread a pixel's 8 channels of z; `total` = n * zh * zw * zc / 8 (space_to_depth_handles:
// z's element count fits in 32 bits).
__global__ void input_kernel(Rewrite g, int total, const uint16_t* __restrict__ x,
                             uint16_t* __restrict__ z) {
  const int groups = g.zc / kChannelsPerThread;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    const int group = t % groups, pixel = t / groups;
    const int q = pixel % g.zw, rest = pixel / g.zw;
    const int r = rest % g.zh, n = rest / g.zh;
    const uint16_t* image = x + int64_t{n} * g.h * g.w * g.c;
    uint16_t v[kChannelsPerThread];
#pragma unroll
    for (int u = 0; u < kChannelsPerThread; ++u) {
      int ih = 0, iw = 0, ch = 0;
      v[u] = z_source(g.c, g.h, g.w, g.row_first, g.col_first, r, q, group * kChannelsPerThread + u,
                      &ih, &iw, &ch)
                 ? image[(ih * g.w + iw) * g.c + ch]
                 : uint16_t{0};
    }
    uint4 packed;
    packed.x = v[0] | (uint32_t{v[1]} << 16);
    packed.y = v[2] | (uint32_t{v[3]} << 16);
    packed.z = v[4] | (uint32_t{v[5]} << 16);
    packed.w = v[6] | (uint32_t{v[7]} << 16);
    reinterpret_cast<uint4*>(z)[t] = packed;
  }
}

// The tap and channel of w that w2's element t (OHWI over r.inner) comes from.
__device__ __forceinline__ bool weight_source(const Rewrite& g, int t, int* k, int* i, int* j,
                                              int* ch) {
  const int ch2 = t % g.zc, tap = t / g.zc;
  const int qb = tap % g.taps_w, rest = tap / g.taps_w;
  const int ra = rest % g.taps_h;
  *k = rest / g.taps_h;
  return w2_source(g.c, g.kh, g.kw, g.pad_h, g.pad_w, g.row_first, g.col_first, ra, qb, ch2, i, j,
                   ch);
}

__global__ void weights_kernel(Rewrite g, int total, const uint16_t* __restrict__ w,
                               uint16_t* __restrict__ w2) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    int k = 0, i = 0, j = 0, ch = 0;
    w2[t] = weight_source(g, t, &k, &i, &j, &ch) ? w[((k * g.kh + i) * g.kw + j) * g.c + ch]
                                                 : uint16_t{0};
  }
}

// Every element of dw is one element of dw2 (the CPU test checks it): a plain scatter.
template <typename In, typename Out>
__global__ void weight_grad_kernel(Rewrite g, int total, const In* __restrict__ dw2,
                                   Out* __restrict__ dw) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    int k = 0, i = 0, j = 0, ch = 0;
    if (weight_source(g, t, &k, &i, &j, &ch)) {
      dw[((k * g.kh + i) * g.kw + j) * g.c + ch] = from_f<Out>(to_f(dw2[t]));
    }
  }
}

int inner_weights(const SpaceToDepth& r) {
  return static_cast<int>(r.inner.k * r.inner.kh * r.inner.kw * r.inner.c);
}

// bf16 alone: cuDNN runs the f16 stem fast as it is (space_to_depth_handles).
void check_bf16(DType dtype, const char* op) {
  FRUGAL_CHECK(dtype == DType::bf16, op, ": bf16, not ", dtype);
}

}  // namespace

void space_to_depth_input(const Context& ctx, DType dtype, const Conv2dShape& s,
                          const SpaceToDepth& r, const void* x, void* z) {
  const char* op = "conv2d (space to depth input)";
  check_bf16(dtype, op);
  cudaStream_t stream = stream_of(ctx, op);
  const auto total =
      static_cast<int>(r.inner.n * r.inner.h * r.inner.w * r.inner.c / kChannelsPerThread);
  input_kernel<<<grid_for(ctx, total), kThreads, 0, stream>>>(
      rewrite_of(s, r), total, static_cast<const uint16_t*>(x), static_cast<uint16_t*>(z));
  FRUGAL_LAUNCH_CHECK();
}

void space_to_depth_weights(const Context& ctx, DType dtype, const Conv2dShape& s,
                            const SpaceToDepth& r, const void* w, void* w2) {
  const char* op = "conv2d (space to depth weights)";
  check_bf16(dtype, op);
  cudaStream_t stream = stream_of(ctx, op);
  const int total = inner_weights(r);
  weights_kernel<<<grid_for(ctx, total), kThreads, 0, stream>>>(
      rewrite_of(s, r), total, static_cast<const uint16_t*>(w), static_cast<uint16_t*>(w2));
  FRUGAL_LAUNCH_CHECK();
}

void space_to_depth_weight_grad(const Context& ctx, DType dtype, DType dw_dtype,
                                const Conv2dShape& s, const SpaceToDepth& r, const void* dw2,
                                void* dw) {
  const char* op = "conv2d_backward_weight (space to depth)";
  check_bf16(dtype, op);
  FRUGAL_CHECK(dw_dtype == dtype || dw_dtype == DType::f32, op, ": ", dtype, " inputs give dw in ",
               dtype, " or f32, not ", dw_dtype);
  cudaStream_t stream = stream_of(ctx, op);
  const int total = inner_weights(r);
  const Rewrite g = rewrite_of(s, r);
  auto launch = [&](auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    weight_grad_kernel<In, Out><<<grid_for(ctx, total), kThreads, 0, stream>>>(
        g, total, static_cast<const In*>(dw2), static_cast<Out*>(dw));
    FRUGAL_LAUNCH_CHECK();
  };
  dw_dtype == DType::f32 ? launch(__nv_bfloat16{}, float{})
                         : launch(__nv_bfloat16{}, __nv_bfloat16{});
}

}  // namespace frugal::kernels::cuda
