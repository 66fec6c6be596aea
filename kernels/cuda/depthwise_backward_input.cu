// The depthwise input gradient (Note [Depthwise kernels] in depthwise_conv.h): the 3x3 at stride 1
// as a mirrored forward through the row windows, gather strips for strides 1 and 2 along W, one
// input pixel a thread otherwise.
#include "kernels/cuda/depthwise_windows.cuh"

namespace frugal::kernels::cuda {
namespace {

// dx[n, ih, iw, c] = sum over the taps (a, b) and outputs (oh, ow) that read (ih, iw) of
// dy[n, oh, ow, c] * w[c, a, b], for a strip of kStrip input columns (S = stride_w, dilation_w
// 1; GatherCols) and a pack of V channels. Strips start at column -(pw % S) so that every strip
// has the same tap parities: the first strip's column -1 is computed and not stored.
template <typename T, int K, int V, int S>
__global__ void __launch_bounds__(kGatherThreads)
    backward_input_strip_kernel(Geom g, const T* __restrict__ dy, const float* __restrict__ wt,
                                T* __restrict__ dx) {
  using Cols = GatherCols<K, S>;
  const int cvs = g.c / V, shift = g.pw % S;
  const int strips = (g.w + shift + kStrip - 1) / kStrip;
  const int total = g.n * g.h * strips * cvs;  // <= N * H * W * C: fits (depthwise_handles)
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const GridItem at(i, g.h, strips, cvs, V);
    const int n = at.n, ih = at.r, iw0 = at.col * kStrip - shift, c0 = at.c0;
    const float init[V] = {};
    auto row_of = [&](int a) {
      const int64_t th = int64_t{ih} + g.ph - int64_t{a} * g.dh;  // oh * sh for a tap that reads ih
      return th >= 0 && th % g.sh == 0 ? row_offset(th / g.sh, n, g.oh, g.ow, g.c, c0) : -1;
    };
    const int r_begin = max(0, -iw0), r_end = min(kStrip, g.w - iw0);
    // (iw0 + pw) / S - M, clamped: past the row's end every column reads nothing either way.
    const int col0 =
        static_cast<int>(std::min<int64_t>((int64_t{iw0} + g.pw) / S - Cols::kM, g.ow));
    // After the last column that feeds a pixel before r_end.
    const int col_end = min(g.ow, col0 + (r_end - 1 + Cols::kM * S) / S + 1);
    gather_strip<T, V, Cols>(dy, row_of, col0, col_end, g.ow, g.c, wt + c0, init, dx,
                             ((n * g.h + ih) * g.w + iw0) * g.c + c0, r_begin, r_end);
  }
}

// The input gradient with one input pixel a thread and any stride and dilation.
template <typename T, int K, int V>
__global__ void backward_input_pixel_kernel(Geom g, const T* __restrict__ dy,
                                            const float* __restrict__ wt, T* __restrict__ dx) {
  const int cvs = g.c / V;
  const int total = g.n * g.h * g.w * cvs;
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const GridItem at(i, g.h, g.w, cvs, V);
    const int n = at.n, ih = at.r, iw = at.col, c0 = at.c0;
    float acc[V] = {};
#pragma unroll
    for (int a = 0; a < K; ++a) {
      const int64_t th = int64_t{ih} + g.ph - int64_t{a} * g.dh;  // oh * sh for a tap that reads ih
      if (th < 0 || th % g.sh != 0) continue;
      const int row = row_offset(th / g.sh, n, g.oh, g.ow, g.c, c0);
      if (row < 0) continue;
#pragma unroll
      for (int b = 0; b < K; ++b) {
        const int64_t tw = int64_t{iw} + g.pw - int64_t{b} * g.dw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.ow) continue;
        accumulate_tap<T, V>(acc, dy + row + static_cast<int>(tw / g.sw) * g.c,
                             wt + (a * K + b) * g.c + c0);
      }
    }
    store_pack<T, V>(dx + i * V, acc);
  }
}

template <typename T, int K, int V>
void backward_input_kv(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const T* dy,
                       const float* wt, T* dx) {
  const Geom g = geom_of(s);
  if (uses_strips(s)) {
    const int64_t strips = (s.w + s.pad_w % s.stride_w + kStrip - 1) / kStrip;
    const auto kernel = s.stride_w == 1 ? backward_input_strip_kernel<T, K, V, 1>
                                        : backward_input_strip_kernel<T, K, V, 2>;
    const int64_t work = s.n * s.h * strips * (s.c / V);
    kernel<<<resident_grid(ctx, kernel, work, kGatherThreads), kGatherThreads, 0, stream>>>(g, dy,
                                                                                            wt, dx);
  } else {
    const int64_t work = s.n * s.h * s.w * (s.c / V);
    backward_input_pixel_kernel<T, K, V>
        <<<grid_for(ctx, work), kThreads, 0, stream>>>(g, dy, wt, dx);
  }
  FRUGAL_LAUNCH_CHECK();
}

// Note [Input gradients as mirrored forwards]: at stride 1 without dilation, dx[ih, iw] = sum
// over the taps (a, b) of dy[ih + ph - a, iw + pw - b] * w[a, b]: the forward over dy with the
// taps mirrored, (a, b) -> (K-1-a, K-1-b), and padding K-1-ph and K-1-pw, whose output is h x w
// again. So the 3x3 input gradient takes the forward's row windows (Note [Row windows] in
// depthwise_windows.cuh) instead of the gather strips, which load each dy pixel 3.75 times.
Conv2dShape mirrored_shape(const Conv2dShape& s) {
  Conv2dShape m = s;
  m.h = s.oh(), m.w = s.ow();
  m.pad_h = s.kh - 1 - s.pad_h, m.pad_w = s.kw - 1 - s.pad_w;
  return m;
}

template <typename T, int K>
void backward_input_k(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* dy,
                      CallWeights<T>& w, void* dx) {
  auto dyt = static_cast<const T*>(dy);
  auto dxt = static_cast<T*>(dx);
  if (K == 3 && uses_row_windows(s) && s.pad_h < K && s.pad_w < K &&
      packs_fit<T, kWindowPack>(s.c, {dy, dx})) {
    forward_window<T, PlainInput, true>(ctx, stream, mirrored_shape(s), BnActInput{}, dyt,
                                        w.plain(), nullptr, dxt);
  } else if (packs_fit<T, kPack>(s.c, {dy, dx})) {
    backward_input_kv<T, K, kPack>(ctx, stream, s, dyt, w.transposed(), dxt);
  } else {
    backward_input_kv<T, K, 1>(ctx, stream, s, dyt, w.transposed(), dxt);
  }
}

}  // namespace

void depthwise_backward_input(const Context& ctx, DType dtype, const Conv2dShape& s, const void* dy,
                              const void* w, void* dx) {
  const char* op = "conv2d_backward_input (depthwise)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    CallWeights<T> weights(ctx, stream, s, w);
    if (s.kh == 3)
      backward_input_k<T, 3>(ctx, stream, s, dy, weights, dx);
    else
      backward_input_k<T, 5>(ctx, stream, s, dy, weights, dx);
  });
}

}  // namespace frugal::kernels::cuda
