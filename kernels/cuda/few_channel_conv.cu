// Weight gradient of 3x3 convolutions with at most 4 input channels (Note [Few-channel weight
// gradients] in few_channel_conv.h).
#include <climits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/direct_conv_common.cuh"
#include "kernels/cuda/few_channel_conv.h"

namespace frugal::kernels::cuda {
namespace {

constexpr int kSize = kFewChannelSize;
constexpr int kTaps = kSize * kSize;
constexpr int kMaxChannels = kFewChannelMaxInputs;

// One block: `lanes` consecutive output channels x (kThreads / lanes) rows of output positions,
// positions strided over the row splits (blockIdx.y). Writes
// partial[split, k, tap, c] = sum over its positions of dy[p, k] * x[tap's input of p, c],
// the OHWI order of dw.
template <typename T, int C>
__global__ void few_channel_partial_kernel(Geom g, int lanes, const T* __restrict__ x,
                                           const T* __restrict__ dy,
                                           float* __restrict__ partial) {
  constexpr int M = kTaps * C;
  const int rows = kThreads / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const int r = static_cast<int>(threadIdx.x) / lanes;
  const int k = static_cast<int>(blockIdx.x) * lanes + lane;
  float acc[M];  // [tap][c]
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  if (r < rows && k < g.k) {
    const int64_t positions = static_cast<int64_t>(g.n) * g.oh * g.ow;
    const int64_t step = static_cast<int64_t>(gridDim.y) * rows;
    for (int64_t p64 = static_cast<int64_t>(blockIdx.y) * rows + r; p64 < positions; p64 += step) {
      const float gv = to_f(dy[p64 * g.k + k]);
      int p = static_cast<int>(p64);
      const int ow = p % g.ow;
      p /= g.ow;
      const int oh = p % g.oh, n = p / g.oh;
      const int ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
#pragma unroll
      for (int a = 0; a < kSize; ++a) {
        const int ih = ih0 + a * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        const T* row = x + static_cast<int64_t>(n * g.h + ih) * g.w * C;
#pragma unroll
        for (int b = 0; b < kSize; ++b) {
          const int iw = iw0 + b * g.dw;
          if (iw < 0 || iw >= g.w) continue;
#pragma unroll
          for (int ci = 0; ci < C; ++ci) {
            acc[(a * kSize + b) * C + ci] += gv * to_f(row[iw * C + ci]);
          }
        }
      }
    }
  }
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * lanes;
  sum_block_rows(acc, lanes, rows, [&](int l, int m, float sum) {
    const int64_t col = k0 + l;
    if (col < g.k) partial[(static_cast<int64_t>(blockIdx.y) * g.k + col) * M + m] = sum;
  });
}

template <typename T, int C>
void backward_weight_c(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                       const void* x, const void* dy, DType dw_dtype, void* dw) {
  const Geom g = geom_of(s);
  const int lanes = std::min(g.k, kThreads);
  const int rows = kThreads / lanes;
  const int64_t blocks_x = (g.k + lanes - 1) / lanes;
  const int splits = weight_splits(ctx, blocks_x, s.n * s.oh() * s.ow(), rows);
  const int64_t n = s.k * kTaps * C;
  memory::DataPtr ws = ctx.workspace(static_cast<size_t>(splits * n) * sizeof(float));
  auto partial = static_cast<float*>(ws.get());
  dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  few_channel_partial_kernel<T, C><<<grid, kThreads, 0, stream>>>(
      g, lanes, static_cast<const T*>(x), static_cast<const T*>(dy), partial);
  FRUGAL_LAUNCH_CHECK();
  finish_weight_gradient<T>(ctx, stream, n, splits, partial, dw_dtype, dw);
}

}  // namespace

void few_channel_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                                 const Conv2dShape& s, const void* x, const void* dy, void* dw) {
  const char* op = "conv2d_backward_weight (few input channels)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    switch (s.c) {
      case 1: backward_weight_c<T, 1>(ctx, stream, s, x, dy, dw_dtype, dw); break;
      case 2: backward_weight_c<T, 2>(ctx, stream, s, x, dy, dw_dtype, dw); break;
      case 3: backward_weight_c<T, 3>(ctx, stream, s, x, dy, dw_dtype, dw); break;
      default: backward_weight_c<T, 4>(ctx, stream, s, x, dy, dw_dtype, dw); break;
    }
  });
}

}  // namespace frugal::kernels::cuda
