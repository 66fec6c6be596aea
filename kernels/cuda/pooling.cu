// Max, average and global average pooling over NHWC on CUDA. Forward: one thread per output
// element (max pooling: per pack of channels), and global average pooling as a middle sum (Note
// [Middle sums] in reduce.cu). Backward gathers per input element over the windows that cover it
// (no atomics, so it is deterministic), max pooling from each window's first maximum found as
// the CPU finds it.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/pooling.h"
#include "kernels/reduce.h"

namespace frugal::kernels::cuda {
namespace {

// Plain copy of Pool2dShape's numbers for the device, in the index type I of the kernels that
// take it (int32 where every offset fits: Note [Pool index math]).
template <typename I = int64_t>
struct Geometry {
  I n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow;
  bool include_pad;
};

template <typename I = int64_t>
Geometry<I> geometry(const Pool2dShape& s) {
  auto i = [](int64_t v) { return static_cast<I>(v); };
  return {i(s.n),
          i(s.h),
          i(s.w),
          i(s.c),
          i(s.kh),
          i(s.kw),
          i(s.stride_h),
          i(s.stride_w),
          i(s.pad_h),
          i(s.pad_w),
          i(s.oh()),
          i(s.ow()),
          s.count_include_pad};
}

// The window of output (oh, ow) clipped to the input, and PyTorch's count_include_pad divisor
// (the window clipped to the padded input).
template <typename I>
struct Window {
  I h0, h1, w0, w1, padded_count;
};

template <typename I>
__device__ __forceinline__ Window<I> window_of(const Geometry<I>& g, I oh, I ow) {
  I hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  I he = min(hs + g.kh, g.h + g.ph), we = min(ws + g.kw, g.w + g.pw);
  Window<I> win;
  win.padded_count = (he - hs) * (we - ws);
  win.h0 = max(hs, I{0});
  win.w0 = max(ws, I{0});
  win.h1 = min(he, g.h);
  win.w1 = min(we, g.w);
  return win;
}

// Note [Pool index math]
// The max-pool kernels take V channels a thread (16-byte packs when C and the pointers allow,
// pack_width) and index in int32 when every element offset fits. One channel a thread in int64
// spent most of its time on five 64-bit divisions per element: ResNet-18's one 3x3 max pool took
// 0.91 ms forward and 2.9 ms backward of its f16 step on the H200, against PyTorch's 0.42 and
// 0.91 (about 0.16 and 0.48 ms since).
// Coordinates of pack p of an NHWC tensor [n, h, w, c / V]: (n, y, x, first channel).
template <int V, typename I>
struct PackPos {
  I n, y, x, ch0;
  __device__ __forceinline__ PackPos(I p, I h, I w, I c) {
    const I cv = c / V;
    ch0 = (p % cv) * V;
    I rest = p / cv;
    x = rest % w;
    rest /= w;
    y = rest % h;
    n = rest / h;
  }
};

// First maximum of a window in scan order for V channels; NaN wins (as on the CPU). arg[v] is
// its (ih * w + iw), -1 for an empty window.
template <typename T, int V, typename I>
__device__ __forceinline__ void window_argmax(const Geometry<I>& g, const T* xn, I ch0,
                                              const Window<I>& win, float (&best)[V], I (&arg)[V]) {
#pragma unroll
  for (int v = 0; v < V; ++v) best[v] = -INFINITY, arg[v] = -1;
  for (I ih = win.h0; ih < win.h1; ++ih) {
    for (I iw = win.w0; iw < win.w1; ++iw) {
      const Pack<T, V> xv = load_pack<T, V>(xn + (ih * g.w + iw) * g.c + ch0);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float val = to_f(xv.v[v]);
        if (arg[v] < 0 || ((val > best[v] || isnan(val)) && !isnan(best[v]))) {
          best[v] = val;
          arg[v] = ih * g.w + iw;
        }
      }
    }
  }
}

// Max backward in two passes, both deterministic and in the CPU's order:
//   1. each output records where in its window its first maximum lies (window_argmax, as the
//      forward found it), one byte per output in kernel scratch (two for windows past 254);
//   2. each input element sums, over the windows that cover it in (oh, ow) order, the output
//      gradients of those whose recorded maximum is this element.
// Finding each covering window's maximum again per input instead costs a 3x3 stride-2 pool four
// argmax scans per input: 7.7 of a ResNet-18 step's 16.9 ms of kernel time on the H200.
template <typename W>
constexpr int64_t kNoArgmax = std::numeric_limits<W>::max();  // larger than any window offset

// The window scan of both directions: the forward writes each window's maximum (y), the
// backward's first pass where it lies (where); the other pointer is null.
template <typename T, typename W, int V, typename I>
__global__ void max_window_kernel(Geometry<I> g, const T* __restrict__ x, T* __restrict__ y,
                                  W* __restrict__ where) {
  const I packs = g.n * g.oh * g.ow * (g.c / V);
  for (I p = static_cast<I>(thread_index()); p < packs; p += static_cast<I>(grid_stride())) {
    const PackPos<V, I> at(p, g.oh, g.ow, g.c);
    float best[V];
    I arg[V];
    window_argmax<T, V, I>(g, x + at.n * g.h * g.w * g.c, at.ch0, window_of(g, at.y, at.x), best,
                           arg);
    if (y != nullptr) store_pack<T, V>(y + p * V, best);
    if (where != nullptr) {
      const I h0 = at.y * g.sh - g.ph, w0 = at.x * g.sw - g.pw;  // the unclipped window's corner
      Pack<W, V> out;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        out.v[v] = static_cast<W>(arg[v] < 0 ? kNoArgmax<W>
                                             : (arg[v] / g.w - h0) * g.kw + (arg[v] % g.w - w0));
      }
      *reinterpret_cast<Pack<W, V>*>(where + p * V) = out;
    }
  }
}

// Range of outputs along one axis whose window covers input position p.
template <typename I>
__device__ __forceinline__ void covering(I p, I pad, I k, I stride, I out, I* lo, I* hi) {
  I q = p + pad - k + 1;  // first o with o * stride + k - 1 >= p + pad
  *lo = q <= 0 ? 0 : (q + stride - 1) / stride;
  *hi = min((p + pad) / stride + 1, out);
}

template <typename T, typename W, int V, typename I>
__global__ void max_backward_kernel(Geometry<I> g, const W* __restrict__ where,
                                    const T* __restrict__ dy, T* __restrict__ dx) {
  const I packs = g.n * g.h * g.w * (g.c / V);
  for (I p = static_cast<I>(thread_index()); p < packs; p += static_cast<I>(grid_stride())) {
    const PackPos<V, I> at(p, g.h, g.w, g.c);
    I oh0, oh1, ow0, ow1;
    covering(at.y, g.ph, g.kh, g.sh, g.oh, &oh0, &oh1);
    covering(at.x, g.pw, g.kw, g.sw, g.ow, &ow0, &ow1);
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0.0f;
    for (I oh = oh0; oh < oh1; ++oh) {
      for (I ow = ow0; ow < ow1; ++ow) {
        const I o = ((at.n * g.oh + oh) * g.ow + ow) * g.c + at.ch0;
        const I here = (at.y - (oh * g.sh - g.ph)) * g.kw + (at.x - (ow * g.sw - g.pw));
        const Pack<W, V> wv = load_pack<W, V>(where + o);
        bool any = false;
#pragma unroll
        for (int v = 0; v < V; ++v) any = any || wv.v[v] == here;
        if (!any) continue;  // most windows' maxima lie elsewhere: their gradients go unread
        const Pack<T, V> gv = load_pack<T, V>(dy + o);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          if (wv.v[v] == here) acc[v] += to_f(gv.v[v]);
        }
      }
    }
    store_pack<T, V>(dx + p * V, acc);
  }
}

__device__ __forceinline__ float avg_divisor(const Geometry<>& g, const Window<int64_t>& win) {
  int64_t count = g.include_pad ? win.padded_count : (win.h1 - win.h0) * (win.w1 - win.w0);
  return 1.0f / static_cast<float>(count);
}

template <typename T>
__global__ void avg_forward_kernel(Geometry<> g, const T* x, T* y) {
  int64_t total = g.n * g.oh * g.ow * g.c;
  for (int64_t i = thread_index(); i < total; i += grid_stride()) {
    int64_t ch = i % g.c, rest = i / g.c;
    int64_t ow = rest % g.ow, oh = (rest / g.ow) % g.oh, n = rest / (g.ow * g.oh);
    const T* xn = x + n * g.h * g.w * g.c;
    Window<int64_t> win = window_of(g, oh, ow);
    float acc = 0.0f;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) acc += to_f(xn[(ih * g.w + iw) * g.c + ch]);
    }
    y[i] = from_f<T>(acc * avg_divisor(g, win));
  }
}

template <typename T>
__global__ void avg_backward_kernel(Geometry<> g, const T* dy, T* dx) {
  int64_t total = g.n * g.h * g.w * g.c;
  for (int64_t i = thread_index(); i < total; i += grid_stride()) {
    int64_t ch = i % g.c, rest = i / g.c;
    int64_t iw = rest % g.w, ih = (rest / g.w) % g.h, n = rest / (g.w * g.h);
    int64_t oh0, oh1, ow0, ow1;
    covering(ih, g.ph, g.kh, g.sh, g.oh, &oh0, &oh1);
    covering(iw, g.pw, g.kw, g.sw, g.ow, &ow0, &ow1);
    float acc = 0.0f;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        acc += to_f(dy[((n * g.oh + oh) * g.ow + ow) * g.c + ch]) *
               avg_divisor(g, window_of(g, oh, ow));
      }
    }
    dx[i] = from_f<T>(acc);
  }
}

// dx[b, p, c] = dy[b, c] / hw, one 16-byte pack of channels a thread (V = 1 when c does not
// divide into packs); I is the index type (Note [Pool index math]).
template <typename T, int V, typename I>
__global__ void global_avg_backward_kernel(I n, I hw, I c, const T* dy, T* dx) {
  const float inv = 1.0f / static_cast<float>(hw);
  const I packs = c / V, total = n * hw * packs;
  for (I i = static_cast<I>(thread_index()); i < total; i += static_cast<I>(grid_stride())) {
    const I pack = i % packs, b = i / (hw * packs);
    Pack<T, V> g = load_pack<T, V>(dy + b * c + pack * V);
    float out[V];
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = to_f(g.v[v]) * inv;
    store_pack<T, V>(dx + static_cast<int64_t>(i) * V, out);
  }
}

void check_pool(const Context& ctx, const Pool2dShape& s, const char* op) {
  stream_of(ctx, op);
  FRUGAL_CHECK(s.n >= 0 && s.h > 0 && s.w > 0 && s.c > 0 && s.kh > 0 && s.kw > 0 &&
                   s.stride_h > 0 && s.stride_w > 0 && s.pad_h >= 0 && s.pad_w >= 0,
               op, ": bad pooling geometry x=[", s.n, ", ", s.h, ", ", s.w, ", ", s.c, "] kernel ",
               s.kh, "x", s.kw, " stride ", s.stride_h, "x", s.stride_w, " padding ", s.pad_h, "x",
               s.pad_w);
  FRUGAL_CHECK(s.oh() > 0 && s.ow() > 0, op, ": empty output for x=[", s.n, ", ", s.h, ", ", s.w,
               ", ", s.c, "] kernel ", s.kh, "x", s.kw);
  FRUGAL_CHECK(2 * s.pad_h <= s.kh && 2 * s.pad_w <= s.kw, op, ": padding ", s.pad_h, "x", s.pad_w,
               " exceeds half the kernel ", s.kh, "x", s.kw);
}

}  // namespace

#define FRUGAL_POOL_LAUNCH(op, kernel, count, ...)                        \
  do {                                                                    \
    cudaStream_t s_ = stream_of(ctx, op);                                 \
    int64_t count_ = (count);                                             \
    if (count_ == 0) return;                                              \
    DeviceGuard guard_(ctx.device);                                       \
    FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {                                 \
      kernel<T><<<grid_for(ctx, count_), kThreads, 0, s_>>>(__VA_ARGS__); \
      FRUGAL_LAUNCH_CHECK();                                              \
    });                                                                   \
  } while (0)

namespace {

// Runs launch(T, V, I) for dtype, the channel pack these pointers allow, and the index type
// (Note [Pool index math]).
template <typename Launch>
void with_pool_kernel(DType dtype, const char* op, const Pool2dShape& s,
                      std::initializer_list<const void*> pointers, Launch launch) {
  const int64_t elements = std::max(s.n * s.h * s.w * s.c, s.n * s.oh() * s.ow() * s.c);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    with_pack_width<T>(s.c, pointers, [&](auto pack) {
      with_index_type(elements, [&](auto index) { launch(T{}, pack, index); });
    });
  });
}

}  // namespace

void max_pool2d_forward(const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                        void* y) {
  const char* op = "max_pool2d_forward";
  check_pool(ctx, s, op);
  cudaStream_t stream = stream_of(ctx, op);
  if (s.n == 0) return;
  DeviceGuard guard(ctx.device);
  with_pool_kernel(dtype, op, s, {x, y}, [&](auto t, auto pack, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    constexpr int V = decltype(pack)::value;
    max_window_kernel<T, uint8_t, V, I>
        <<<grid_for(ctx, s.n * s.oh() * s.ow() * s.c / V), kThreads, 0, stream>>>(
            geometry<I>(s), static_cast<const T*>(x), static_cast<T*>(y), nullptr);
    FRUGAL_LAUNCH_CHECK();
  });
}

void max_pool2d_backward(const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                         const void* dy, void* dx) {
  const char* op = "max_pool2d_backward";
  check_pool(ctx, s, op);
  FRUGAL_CHECK(s.kh * s.kw < kNoArgmax<uint16_t>, op, ": a ", s.kh, "x", s.kw,
               " window has more positions than two bytes can number");
  cudaStream_t stream = stream_of(ctx, op);
  if (s.n == 0) return;
  DeviceGuard guard(ctx.device);
  memory::DataPtr where = ctx.workspace(cuda_max_pool_backward_scratch_bytes(s));
  // Note [Kernel scratch]: freed in stream order. It joins the alignment check of the packs.
  auto run = [&](auto where_type) {
    using W = decltype(where_type);
    auto* w = static_cast<W*>(where.get());
    with_pool_kernel(dtype, op, s, {x, dy, dx, w}, [&](auto t, auto pack, auto index) {
      using T = decltype(t);
      using I = decltype(index);
      constexpr int V = decltype(pack)::value;
      const Geometry<I> g = geometry<I>(s);
      max_window_kernel<T, W, V, I>
          <<<grid_for(ctx, s.n * s.oh() * s.ow() * s.c / V), kThreads, 0, stream>>>(
              g, static_cast<const T*>(x), nullptr, w);
      FRUGAL_LAUNCH_CHECK();
      max_backward_kernel<T, W, V, I>
          <<<grid_for(ctx, s.n * s.h * s.w * s.c / V), kThreads, 0, stream>>>(
              g, w, static_cast<const T*>(dy), static_cast<T*>(dx));
      FRUGAL_LAUNCH_CHECK();
    });
  };
  if (s.kh * s.kw < kNoArgmax<uint8_t>) {
    run(uint8_t{});
  } else {
    run(uint16_t{});
  }
}

void avg_pool2d_forward(const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                        void* y) {
  check_pool(ctx, s, "avg_pool2d_forward");
  FRUGAL_POOL_LAUNCH("avg_pool2d_forward", avg_forward_kernel, s.n * s.oh() * s.ow() * s.c,
                     geometry(s), static_cast<const T*>(x), static_cast<T*>(y));
}

void avg_pool2d_backward(const Context& ctx, DType dtype, const Pool2dShape& s, const void* dy,
                         void* dx) {
  check_pool(ctx, s, "avg_pool2d_backward");
  FRUGAL_POOL_LAUNCH("avg_pool2d_backward", avg_backward_kernel, s.n * s.h * s.w * s.c, geometry(s),
                     static_cast<const T*>(dy), static_cast<T*>(dx));
}

// The mean over H x W is a middle sum (Note [Middle sums] in reduce.cu) scaled by 1 / hw.
void global_avg_pool_forward(const Context& ctx, DType dtype, int64_t n, int64_t hw, int64_t c,
                             const void* x, void* y) {
  FRUGAL_CHECK(n >= 0 && hw > 0 && c > 0, "global_avg_pool_forward: bad shape [", n, ", ", hw, ", ",
               c, "]");
  cuda::sum_to(ctx, dtype, make_reduction(Shape{n, hw, c}, Shape{n, 1, c}), x,
               1.0 / static_cast<double>(hw), y);
}

void global_avg_pool_backward(const Context& ctx, DType dtype, int64_t n, int64_t hw, int64_t c,
                              const void* dy, void* dx) {
  FRUGAL_CHECK(n >= 0 && hw > 0 && c > 0, "global_avg_pool_backward: bad shape [", n, ", ", hw,
               ", ", c, "]");
  cudaStream_t stream = stream_of(ctx, "global_avg_pool_backward");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "global_avg_pool_backward", {
    with_pack_width<T>(c, {dy, dx}, [&](auto pack) {
      with_index_type(n * hw * c, [&](auto index) {
        constexpr int V = decltype(pack)::value;
        using I = decltype(index);
        global_avg_backward_kernel<T, V, I><<<grid_for(ctx, n * hw * c / V), kThreads, 0, stream>>>(
            static_cast<I>(n), static_cast<I>(hw), static_cast<I>(c), static_cast<const T*>(dy),
            static_cast<T*>(dx));
        FRUGAL_LAUNCH_CHECK();
      });
    });
  });
}

}  // namespace frugal::kernels::cuda
