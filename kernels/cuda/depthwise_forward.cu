// The depthwise forward (Note [Depthwise kernels] in depthwise_conv.h): row windows for the 3x3
// at stride 1, strips of kStrip outputs for strides 1 and 2 along W, one output pixel a thread
// otherwise; each reads batch norm's input through where depthwise_reads_bn_act says.
#include "kernels/cuda/depthwise_windows.cuh"

namespace frugal::kernels::cuda {
namespace {

// y[n, oh, ow, c] = bias[c] + sum_{a, b} x[n, oh*sh - ph + a*dh, ow*S - pw + b, c] * w[c, a, b]
// for a strip of kStrip outputs along W (S = stride_w, dilation_w 1) and a pack of V channels;
// x as In makes it of the loaded values.
template <typename T, int K, int V, int S, class In>
__global__ void __launch_bounds__(kGatherThreads)
    forward_strip_kernel(Geom g, BnActInput bn, const T* __restrict__ x,
                         const float* __restrict__ wt, const T* __restrict__ bias,
                         T* __restrict__ y) {
  const int cvs = g.c / V, strips = (g.ow + kStrip - 1) / kStrip;
  const int total = g.n * g.oh * strips * cvs;  // <= N * OH * OW * C: fits (depthwise_handles)
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const GridItem at(i, g.oh, strips, cvs, V);
    const int n = at.n, oh = at.r, ow0 = at.col * kStrip, c0 = at.c0;
    float init[V] = {};
    if (bias != nullptr) load_floats<T, V>(bias + c0, init);
    auto row_of = [&](int a) {
      return row_offset(int64_t{oh} * g.sh - g.ph + int64_t{a} * g.dh, n, g.h, g.w, g.c, c0);
    };
    const int count = min(kStrip, g.ow - ow0);
    // Past the row's end every column reads nothing, clamped or not.
    const int col0 = static_cast<int>(std::min<int64_t>(int64_t{ow0} * S - g.pw, g.w));
    const int col_end = min(g.w, col0 + (count - 1) * S + K);  // after the last output's columns
    gather_strip<T, V, ReadCols<K, S>>(x, row_of, col0, col_end, g.w, g.c, wt + c0, init, y,
                                       ((n * g.oh + oh) * g.ow + ow0) * g.c + c0, 0, count,
                                       In(bn, c0));
  }
}

// The forward with one output pixel a thread and any stride and dilation.
template <typename T, int K, int V>
__global__ void forward_pixel_kernel(Geom g, const T* __restrict__ x, const float* __restrict__ wt,
                                     const T* __restrict__ bias, T* __restrict__ y) {
  const int cvs = g.c / V;
  const int total = g.n * g.oh * g.ow * cvs;
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const GridItem at(i, g.oh, g.ow, cvs, V);
    const int n = at.n, oh = at.r, ow = at.col, c0 = at.c0;
    float acc[V] = {};
    if (bias != nullptr) load_floats<T, V>(bias + c0, acc);
#pragma unroll
    for (int a = 0; a < K; ++a) {
      const int row =
          row_offset(int64_t{oh} * g.sh - g.ph + int64_t{a} * g.dh, n, g.h, g.w, g.c, c0);
      if (row < 0) continue;
#pragma unroll
      for (int b = 0; b < K; ++b) {
        const int64_t iw = int64_t{ow} * g.sw - g.pw + int64_t{b} * g.dw;
        if (iw < 0 || iw >= g.w) continue;
        accumulate_tap<T, V>(acc, x + row + static_cast<int>(iw) * g.c,
                             wt + (a * K + b) * g.c + c0);
      }
    }
    store_pack<T, V>(y + i * V, acc);  // (pixel * C + c0) == i * V
  }
}

// With In other than PlainInput only where uses_strips (depthwise_fuses_bn_act).
template <typename T, int K, int V, class In>
void forward_kv(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const BnActInput& bn,
                const T* x, const float* wt, const T* bias, T* y) {
  const Geom g = geom_of(s);
  if (uses_strips(s)) {
    const int64_t work = s.n * s.oh() * ((s.ow() + kStrip - 1) / kStrip) * (s.c / V);
    const auto kernel = s.stride_w == 1 ? forward_strip_kernel<T, K, V, 1, In>
                                        : forward_strip_kernel<T, K, V, 2, In>;
    // one wave (Note [Grids by occupancy] in cuda_common.cuh)
    kernel<<<resident_grid(ctx, kernel, work, kGatherThreads), kGatherThreads, 0, stream>>>(
        g, bn, x, wt, bias, y);
  } else if constexpr (std::is_same_v<In, PlainInput>) {
    const int64_t work = s.n * s.oh() * s.ow() * (s.c / V);
    forward_pixel_kernel<T, K, V><<<grid_for(ctx, work), kThreads, 0, stream>>>(g, x, wt, bias, y);
  }
  FRUGAL_LAUNCH_CHECK();
}

// With bn, packs fit and the strips take the shape (depthwise_reads_bn_act).
template <typename T, int K>
void forward_k(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* x,
               CallWeights<T>& w, const void* bias, void* y, const BnActInput* bn) {
  auto xt = static_cast<const T*>(x), bt = static_cast<const T*>(bias);
  auto yt = static_cast<T*>(y);
  if (K == 3 && uses_row_windows(s) &&
      (bn != nullptr || packs_fit<T, kWindowPack>(s.c, {x, bias, y}))) {
    with_input<T, kWindowPack>(bn, [&](auto in) {
      using In = typename decltype(in)::type;
      forward_window<T, In>(ctx, stream, s, bn != nullptr ? *bn : BnActInput{}, xt, w.plain(), bt,
                            yt);
    });
  } else if (bn != nullptr || packs_fit<T, kPack>(s.c, {x, bias, y})) {
    with_input<T, kPack>(bn, [&](auto in) {
      using In = typename decltype(in)::type;
      forward_kv<T, K, kPack, In>(ctx, stream, s, bn != nullptr ? *bn : BnActInput{}, xt,
                                  w.transposed(), bt, yt);
    });
  } else {
    forward_kv<T, K, 1, PlainInput>(ctx, stream, s, BnActInput{}, xt, w.transposed(), bt, yt);
  }
}

}  // namespace

bool depthwise_reads_bn_act(DType dtype, const Conv2dShape& s, const BnActInput& in,
                            std::initializer_list<const void*> pointers) {
  if (!depthwise_fuses_bn_act(s, in.act) || s.c % kPack != 0) return false;
  auto aligned = [](const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  const size_t pack_bytes = kPack * dtype_size(dtype), stats_bytes = kPack * sizeof(float);
  return std::all_of(pointers.begin(), pointers.end(),
                     [&](const void* p) { return aligned(p, pack_bytes); }) &&
         aligned(in.mean, stats_bytes) && aligned(in.invstd, stats_bytes) &&
         aligned(in.gamma, stats_bytes) && aligned(in.beta, stats_bytes);
}

void depthwise_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                       const void* w, const void* bias, void* y, const BnActInput* bn) {
  const char* op = "conv2d_forward (depthwise)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CHECK(bn == nullptr || depthwise_reads_bn_act(dtype, s, *bn, {x, bias, y}), op,
               ": no kernel normalizes its loads for ", s.str());
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    CallWeights<T> weights(ctx, stream, s, w);
    if (s.kh == 3)
      forward_k<T, 3>(ctx, stream, s, x, weights, bias, y, bn);
    else
      forward_k<T, 5>(ctx, stream, s, x, weights, bias, y, bn);
  });
}

}  // namespace frugal::kernels::cuda
