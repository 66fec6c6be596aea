// Depthwise NHWC convolution kernels (Note [Depthwise kernels] in depthwise_conv.h): forward and
// input gradient gather over the taps with one 16-byte pack of channels per thread; the weight
// gradient sums row splits into an f32 workspace, then adds the splits in order.
#include <climits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/depthwise_conv.h"
#include "kernels/cuda/direct_conv_common.cuh"

namespace frugal::kernels::cuda {
namespace {

template <int V>
__device__ __forceinline__ void load_floats(const float* p, float* out) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      float4 f = *reinterpret_cast<const float4*>(p + i);
      out[i] = f.x, out[i + 1] = f.y, out[i + 2] = f.z, out[i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = p[i];
  }
}

// acc[v] += src[v] * w[v] for one tap: a pack of activations or gradients times the tap's
// transposed weights.
template <typename T, int V>
__device__ __forceinline__ void accumulate_tap(float* acc, const T* src, const float* w) {
  Pack<T, V> sv = load_pack<T, V>(src);
  float wv[V];
  load_floats<V>(w, wv);
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] += to_f(sv.v[v]) * wv[v];
}

// wt[tap, c] = w[c, tap] in f32: weights [C, kh, kw, 1] become packs along the channels.
template <typename T>
__global__ void transpose_weight_kernel(int c, int taps, const T* w, float* wt) {
  for (int64_t i = thread_index(); i < static_cast<int64_t>(c) * taps; i += grid_stride()) {
    int ch = static_cast<int>(i / taps), tap = static_cast<int>(i % taps);
    wt[static_cast<int64_t>(tap) * c + ch] = to_f(w[i]);
  }
}

// y[n, oh, ow, c] = bias[c] + sum_{a, b} x[n, oh*sh - ph + a*dh, ow*sw - pw + b*dw, c] * w[c, a, b]
template <typename T, int K, int V>
__global__ void forward_kernel(Geom g, const T* __restrict__ x, const float* __restrict__ wt,
                               const T* __restrict__ bias, T* __restrict__ y) {
  const int cvs = g.c / V;
  const int64_t total = static_cast<int64_t>(g.n) * g.oh * g.ow * cvs;
  for (int64_t i = thread_index(); i < total; i += grid_stride()) {
    int cv = static_cast<int>(i % cvs), p = static_cast<int>(i / cvs);
    const int ow = p % g.ow;
    p /= g.ow;
    const int oh = p % g.oh, n = p / g.oh, c0 = cv * V;
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = bias != nullptr ? to_f(bias[c0 + v]) : 0.0f;
    const int ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
#pragma unroll
    for (int a = 0; a < K; ++a) {
      const int ih = ih0 + a * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      const T* row = x + static_cast<int64_t>(n * g.h + ih) * g.w * g.c + c0;
#pragma unroll
      for (int b = 0; b < K; ++b) {
        const int iw = iw0 + b * g.dw;
        if (iw < 0 || iw >= g.w) continue;
        accumulate_tap<T, V>(acc, row + static_cast<int64_t>(iw) * g.c,
                             wt + (a * K + b) * g.c + c0);
      }
    }
    store_pack<T, V>(y + i * V, acc);  // (pixel * C + c0) == i * V
  }
}

// dx[n, ih, iw, c] = sum over the taps (a, b) and outputs (oh, ow) that read (ih, iw) of
// dy[n, oh, ow, c] * w[c, a, b].
template <typename T, int K, int V>
__global__ void backward_input_kernel(Geom g, const T* __restrict__ dy,
                                      const float* __restrict__ wt, T* __restrict__ dx) {
  const int cvs = g.c / V;
  const int64_t total = static_cast<int64_t>(g.n) * g.h * g.w * cvs;
  for (int64_t i = thread_index(); i < total; i += grid_stride()) {
    int cv = static_cast<int>(i % cvs), p = static_cast<int>(i / cvs);
    const int iw = p % g.w;
    p /= g.w;
    const int ih = p % g.h, n = p / g.h, c0 = cv * V;
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0.0f;
#pragma unroll
    for (int a = 0; a < K; ++a) {
      const int th = ih + g.ph - a * g.dh;  // oh * sh when a tap of row oh reads row ih
      if (th < 0 || th % g.sh != 0) continue;
      const int oh = th / g.sh;
      if (oh >= g.oh) continue;
      const T* row = dy + static_cast<int64_t>(n * g.oh + oh) * g.ow * g.c + c0;
#pragma unroll
      for (int b = 0; b < K; ++b) {
        const int tw = iw + g.pw - b * g.dw;
        if (tw < 0 || tw % g.sw != 0) continue;
        const int ow = tw / g.sw;
        if (ow >= g.ow) continue;
        accumulate_tap<T, V>(acc, row + static_cast<int64_t>(ow) * g.c,
                             wt + (a * K + b) * g.c + c0);
      }
    }
    store_pack<T, V>(dx + i * V, acc);
  }
}

// One block: `lanes` consecutive channel packs x (kThreads / lanes) rows of output positions,
// positions strided over the row splits (blockIdx.y). Writes
// partial[split, c, tap] = sum over its positions of dy[p, c] * x[tap's input of p, c].
template <typename T, int K, int V>
__global__ void backward_weight_partial_kernel(Geom g, int lanes, const T* __restrict__ x,
                                               const T* __restrict__ dy,
                                               float* __restrict__ partial) {
  constexpr int kTaps = K * K;
  const int cvs = g.c / V, rows = kThreads / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const int r = static_cast<int>(threadIdx.x) / lanes;
  const int cv = static_cast<int>(blockIdx.x) * lanes + lane;
  float acc[kTaps * V];  // [tap][v]
#pragma unroll
  for (int m = 0; m < kTaps * V; ++m) acc[m] = 0.0f;
  if (r < rows && cv < cvs) {
    const int c0 = cv * V;
    const int64_t positions = static_cast<int64_t>(g.n) * g.oh * g.ow;
    const int64_t step = static_cast<int64_t>(gridDim.y) * rows;
    for (int64_t p64 = static_cast<int64_t>(blockIdx.y) * rows + r; p64 < positions; p64 += step) {
      int p = static_cast<int>(p64);
      Pack<T, V> gp = load_pack<T, V>(dy + p64 * g.c + c0);
      float gv[V];
#pragma unroll
      for (int v = 0; v < V; ++v) gv[v] = to_f(gp.v[v]);
      const int ow = p % g.ow;
      p /= g.ow;
      const int oh = p % g.oh, n = p / g.oh;
      const int ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
#pragma unroll
      for (int a = 0; a < K; ++a) {
        const int ih = ih0 + a * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        const T* row = x + static_cast<int64_t>(n * g.h + ih) * g.w * g.c + c0;
#pragma unroll
        for (int b = 0; b < K; ++b) {
          const int iw = iw0 + b * g.dw;
          if (iw < 0 || iw >= g.w) continue;
          Pack<T, V> xv = load_pack<T, V>(row + static_cast<int64_t>(iw) * g.c);
#pragma unroll
          for (int v = 0; v < V; ++v) acc[(a * K + b) * V + v] += gv[v] * to_f(xv.v[v]);
        }
      }
    }
  }
  // Sum over the block's rows (Note [Block row sums]); m = tap * V + v.
  const int64_t cv0 = static_cast<int64_t>(blockIdx.x) * lanes;
  sum_block_rows(acc, lanes, rows, [&](int l, int m, float sum) {
    const int64_t col = cv0 + l;
    if (col < cvs) {
      partial[(static_cast<int64_t>(blockIdx.y) * g.c + col * V + m % V) * kTaps + m / V] = sum;
    }
  });
}

// Weights transposed to [taps, C] f32 in a workspace the caller keeps alive.
template <typename T>
memory::DataPtr transposed_weights(const Context& ctx, cudaStream_t stream,
                                   const Conv2dShape& s, const void* w) {
  const int taps = static_cast<int>(s.kh * s.kw);
  memory::DataPtr wt = ctx.workspace(static_cast<size_t>(s.c * taps) * sizeof(float));
  transpose_weight_kernel<T><<<grid_for(ctx, s.c * taps), kThreads, 0, stream>>>(
      static_cast<int>(s.c), taps, static_cast<const T*>(w), static_cast<float*>(wt.get()));
  FRUGAL_LAUNCH_CHECK();
  return wt;
}

template <typename T, int K>
void forward_k(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* x,
               const float* wt, const void* bias, void* y) {
  const Geom g = geom_of(s);
  const int v = pack_width<T>(s.c, {x, bias, y});
  const int64_t work = s.n * s.oh() * s.ow() * (s.c / v);
  auto xt = static_cast<const T*>(x);
  auto bt = static_cast<const T*>(bias);
  auto yt = static_cast<T*>(y);
  if (v == kVec<T>) {
    forward_kernel<T, K, kVec<T>><<<grid_for(ctx, work), kThreads, 0, stream>>>(g, xt, wt, bt, yt);
  } else {
    forward_kernel<T, K, 1><<<grid_for(ctx, work), kThreads, 0, stream>>>(g, xt, wt, bt, yt);
  }
  FRUGAL_LAUNCH_CHECK();
}

template <typename T, int K>
void backward_input_k(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                      const void* dy, const float* wt, void* dx) {
  const Geom g = geom_of(s);
  const int v = pack_width<T>(s.c, {dy, dx});
  const int64_t work = s.n * s.h * s.w * (s.c / v);
  auto dyt = static_cast<const T*>(dy);
  auto dxt = static_cast<T*>(dx);
  if (v == kVec<T>) {
    backward_input_kernel<T, K, kVec<T>><<<grid_for(ctx, work), kThreads, 0, stream>>>(g, dyt, wt,
                                                                                      dxt);
  } else {
    backward_input_kernel<T, K, 1><<<grid_for(ctx, work), kThreads, 0, stream>>>(g, dyt, wt, dxt);
  }
  FRUGAL_LAUNCH_CHECK();
}

template <typename T, int K, int V>
void backward_weight_kv(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                        const void* x, const void* dy, DType dw_dtype, void* dw) {
  const Geom g = geom_of(s);
  const int cvs = static_cast<int>(s.c / V);
  const int lanes = std::min(cvs, kThreads);
  const int rows = kThreads / lanes;
  const int64_t blocks_x = (cvs + lanes - 1) / lanes;
  const int splits = weight_splits(ctx, blocks_x, s.n * s.oh() * s.ow(), rows);
  const int64_t n = s.c * K * K;
  memory::DataPtr ws = ctx.workspace(static_cast<size_t>(splits * n) * sizeof(float));
  auto partial = static_cast<float*>(ws.get());
  dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  backward_weight_partial_kernel<T, K, V><<<grid, kThreads, 0, stream>>>(
      g, lanes, static_cast<const T*>(x), static_cast<const T*>(dy), partial);
  FRUGAL_LAUNCH_CHECK();
  finish_weight_gradient<T>(ctx, stream, n, splits, partial, dw_dtype, dw);
}

template <typename T, int K>
void backward_weight_k(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                       const void* x, const void* dy, DType dw_dtype, void* dw) {
  // 5x5 keeps one channel per thread: 25 taps x a pack would not fit in registers. 16-bit
  // types take 4 channels (8 bytes) a thread instead of 8 when 8 would not fill the device, as
  // batch_norm.cu does (Note [Narrow packs for small reductions]): f16's packs of 8 took 0.46 ms
  // against f32's 0.35 ms at 32x32 (H200).
  constexpr int V = kVec<T>, kNarrow = V > 4 ? 4 : V;
  if (K == 3 && pack_width<T>(s.c, {x, dy}) == V) {
    const int64_t cvs = s.c / V, lanes = std::min<int64_t>(cvs, kThreads);
    const int64_t blocks_x = (cvs + lanes - 1) / lanes;
    const int splits = weight_splits(ctx, blocks_x, s.n * s.oh() * s.ow(),
                                     static_cast<int>(kThreads / lanes));
    if (V > 4 && blocks_x * splits < int64_t{sm_count(ctx.device.index)} * 4) {
      backward_weight_kv<T, K, kNarrow>(ctx, stream, s, x, dy, dw_dtype, dw);
    } else {
      backward_weight_kv<T, K, V>(ctx, stream, s, x, dy, dw_dtype, dw);
    }
  } else {
    backward_weight_kv<T, K, 1>(ctx, stream, s, x, dy, dw_dtype, dw);
  }
}

}  // namespace

void depthwise_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                       const void* w, const void* bias, void* y) {
  const char* op = "conv2d_forward (depthwise)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    memory::DataPtr wt = transposed_weights<T>(ctx, stream, s, w);
    auto wtp = static_cast<const float*>(wt.get());
    if (s.kh == 3) forward_k<T, 3>(ctx, stream, s, x, wtp, bias, y);
    else forward_k<T, 5>(ctx, stream, s, x, wtp, bias, y);
  });
}

void depthwise_backward_input(const Context& ctx, DType dtype, const Conv2dShape& s,
                              const void* dy, const void* w, void* dx) {
  const char* op = "conv2d_backward_input (depthwise)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    memory::DataPtr wt = transposed_weights<T>(ctx, stream, s, w);
    auto wtp = static_cast<const float*>(wt.get());
    if (s.kh == 3) backward_input_k<T, 3>(ctx, stream, s, dy, wtp, dx);
    else backward_input_k<T, 5>(ctx, stream, s, dy, wtp, dx);
  });
}

void depthwise_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                               const Conv2dShape& s, const void* x, const void* dy, void* dw) {
  const char* op = "conv2d_backward_weight (depthwise)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    if (s.kh == 3) backward_weight_k<T, 3>(ctx, stream, s, x, dy, dw_dtype, dw);
    else backward_weight_k<T, 5>(ctx, stream, s, x, dy, dw_dtype, dw);
  });
}

}  // namespace frugal::kernels::cuda
