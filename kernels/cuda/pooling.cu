// Max, average and global average pooling over NHWC on CUDA. One thread per output element
// forward; backward gathers per input element over the windows that cover it (no atomics, so it
// is deterministic), max pooling from each window's first maximum found as the CPU finds it.
#include <limits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/pooling.h"

namespace frugal::kernels::cuda {
namespace {

// Plain copy of Pool2dShape's numbers for the device.
struct Geometry {
  int64_t n, h, w, c, kh, kw, sh, sw, ph, pw, oh, ow;
  bool include_pad;
};

Geometry geometry(const Pool2dShape& s) {
  return {s.n, s.h, s.w, s.c, s.kh, s.kw, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
          s.oh(), s.ow(), s.count_include_pad};
}

// The window of output (oh, ow) clipped to the input, and PyTorch's count_include_pad divisor
// (the window clipped to the padded input).
struct Window {
  int64_t h0, h1, w0, w1, padded_count;
};

__device__ __forceinline__ Window window_of(const Geometry& g, int64_t oh, int64_t ow) {
  int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  int64_t he = min(hs + g.kh, g.h + g.ph), we = min(ws + g.kw, g.w + g.pw);
  Window win;
  win.padded_count = (he - hs) * (we - ws);
  win.h0 = max(hs, int64_t{0});
  win.w0 = max(ws, int64_t{0});
  win.h1 = min(he, g.h);
  win.w1 = min(we, g.w);
  return win;
}

// First maximum of a window in scan order; NaN wins (as on the CPU). Returns its (ih * w + iw).
template <typename T>
__device__ __forceinline__ int64_t window_argmax(const Geometry& g, const T* xn, int64_t ch,
                                                 const Window& win, float* best_out) {
  float best = -INFINITY;
  int64_t arg = -1;
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      float v = to_f(xn[(ih * g.w + iw) * g.c + ch]);
      if (arg < 0 || ((v > best || isnan(v)) && !isnan(best))) {
        best = v;
        arg = ih * g.w + iw;
      }
    }
  }
  *best_out = best;
  return arg;
}

template <typename T>
__global__ void max_forward_kernel(Geometry g, const T* x, T* y) {
  int64_t total = g.n * g.oh * g.ow * g.c;
  for (int64_t i = thread_index(); i < total; i += grid_stride()) {
    int64_t ch = i % g.c, rest = i / g.c;
    int64_t ow = rest % g.ow, oh = (rest / g.ow) % g.oh, n = rest / (g.ow * g.oh);
    float best;
    window_argmax(g, x + n * g.h * g.w * g.c, ch, window_of(g, oh, ow), &best);
    y[i] = from_f<T>(best);
  }
}

// Range of outputs along one axis whose window covers input position p.
__device__ __forceinline__ void covering(int64_t p, int64_t pad, int64_t k, int64_t stride,
                                         int64_t out, int64_t* lo, int64_t* hi) {
  int64_t q = p + pad - k + 1;  // first o with o * stride + k - 1 >= p + pad
  *lo = q <= 0 ? 0 : (q + stride - 1) / stride;
  *hi = min((p + pad) / stride + 1, out);
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

template <typename T, typename W>
__global__ void max_argmax_kernel(Geometry g, const T* x, W* where) {
  int64_t total = g.n * g.oh * g.ow * g.c;
  for (int64_t i = thread_index(); i < total; i += grid_stride()) {
    int64_t ch = i % g.c, rest = i / g.c;
    int64_t ow = rest % g.ow, oh = (rest / g.ow) % g.oh, n = rest / (g.ow * g.oh);
    float best;
    int64_t arg = window_argmax(g, x + n * g.h * g.w * g.c, ch, window_of(g, oh, ow), &best);
    int64_t ih = arg / g.w, iw = arg % g.w;  // offset from the unclipped window's corner
    where[i] = static_cast<W>(
        arg < 0 ? kNoArgmax<W> : (ih - (oh * g.sh - g.ph)) * g.kw + (iw - (ow * g.sw - g.pw)));
  }
}

template <typename T, typename W>
__global__ void max_backward_kernel(Geometry g, const W* where, const T* dy, T* dx) {
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
        int64_t o = ((n * g.oh + oh) * g.ow + ow) * g.c + ch;
        if (where[o] == (ih - (oh * g.sh - g.ph)) * g.kw + (iw - (ow * g.sw - g.pw))) {
          acc += to_f(dy[o]);
        }
      }
    }
    dx[i] = from_f<T>(acc);
  }
}

__device__ __forceinline__ float avg_divisor(const Geometry& g, const Window& win) {
  int64_t count = g.include_pad ? win.padded_count : (win.h1 - win.h0) * (win.w1 - win.w0);
  return 1.0f / static_cast<float>(count);
}

template <typename T>
__global__ void avg_forward_kernel(Geometry g, const T* x, T* y) {
  int64_t total = g.n * g.oh * g.ow * g.c;
  for (int64_t i = thread_index(); i < total; i += grid_stride()) {
    int64_t ch = i % g.c, rest = i / g.c;
    int64_t ow = rest % g.ow, oh = (rest / g.ow) % g.oh, n = rest / (g.ow * g.oh);
    const T* xn = x + n * g.h * g.w * g.c;
    Window win = window_of(g, oh, ow);
    float acc = 0.0f;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) acc += to_f(xn[(ih * g.w + iw) * g.c + ch]);
    }
    y[i] = from_f<T>(acc * avg_divisor(g, win));
  }
}

template <typename T>
__global__ void avg_backward_kernel(Geometry g, const T* dy, T* dx) {
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

// y[n, c] = mean over hw of x[n, hw, c]: one thread per (n, c), neighbours read neighbours.
template <typename T>
__global__ void global_avg_forward_kernel(int64_t n, int64_t hw, int64_t c, const T* x, T* y) {
  float inv = 1.0f / static_cast<float>(hw);
  for (int64_t i = thread_index(); i < n * c; i += grid_stride()) {
    int64_t b = i / c, ch = i - b * c;
    const T* xb = x + b * hw * c + ch;
    float acc = 0.0f;
    for (int64_t p = 0; p < hw; ++p) acc += to_f(xb[p * c]);
    y[i] = from_f<T>(acc * inv);
  }
}

template <typename T>
__global__ void global_avg_backward_kernel(int64_t n, int64_t hw, int64_t c, const T* dy,
                                           T* dx) {
  float inv = 1.0f / static_cast<float>(hw);
  for (int64_t i = thread_index(); i < n * hw * c; i += grid_stride()) {
    int64_t ch = i % c, b = i / (hw * c);
    dx[i] = from_f<T>(to_f(dy[b * c + ch]) * inv);
  }
}

void check_pool(const Context& ctx, const Pool2dShape& s, const char* op) {
  stream_of(ctx, op);
  FRUGAL_CHECK(s.n >= 0 && s.h > 0 && s.w > 0 && s.c > 0 && s.kh > 0 && s.kw > 0 &&
                   s.stride_h > 0 && s.stride_w > 0 && s.pad_h >= 0 && s.pad_w >= 0,
               op, ": bad pooling geometry x=[", s.n, ", ", s.h, ", ", s.w, ", ", s.c,
               "] kernel ", s.kh, "x", s.kw, " stride ", s.stride_h, "x", s.stride_w,
               " padding ", s.pad_h, "x", s.pad_w);
  FRUGAL_CHECK(s.oh() > 0 && s.ow() > 0, op, ": empty output for x=[", s.n, ", ", s.h, ", ",
               s.w, ", ", s.c, "] kernel ", s.kh, "x", s.kw);
  FRUGAL_CHECK(2 * s.pad_h <= s.kh && 2 * s.pad_w <= s.kw, op, ": padding ", s.pad_h, "x",
               s.pad_w, " exceeds half the kernel ", s.kh, "x", s.kw);
}

}  // namespace

#define FRUGAL_POOL_LAUNCH(op, kernel, count, ...)                                   \
  do {                                                                               \
    cudaStream_t s_ = stream_of(ctx, op);                                            \
    int64_t count_ = (count);                                                        \
    if (count_ == 0) return;                                                         \
    DeviceGuard guard_(ctx.device);                                                  \
    FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {                                            \
      kernel<T><<<grid_for(ctx, count_), kThreads, 0, s_>>>(__VA_ARGS__);            \
      FRUGAL_LAUNCH_CHECK();                                                         \
    });                                                                              \
  } while (0)

void max_pool2d_forward(const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                        void* y) {
  check_pool(ctx, s, "max_pool2d_forward");
  FRUGAL_POOL_LAUNCH("max_pool2d_forward", max_forward_kernel, s.n * s.oh() * s.ow() * s.c,
                     geometry(s), static_cast<const T*>(x), static_cast<T*>(y));
}

void max_pool2d_backward(const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                         const void* dy, void* dx) {
  check_pool(ctx, s, "max_pool2d_backward");
  FRUGAL_CHECK(s.kh * s.kw < kNoArgmax<uint16_t>, "max_pool2d_backward: a ", s.kh, "x", s.kw,
               " window has more positions than two bytes can number");
  const int64_t outputs = s.n * s.oh() * s.ow() * s.c, inputs = s.n * s.h * s.w * s.c;
  cudaStream_t stream = stream_of(ctx, "max_pool2d_backward");
  if (outputs == 0) return;
  DeviceGuard guard(ctx.device);
  auto run = [&](auto where_type) {
    using W = decltype(where_type);
    memory::DataPtr where = ctx.workspace(cuda_max_pool_backward_scratch_bytes(s));
    auto* w = static_cast<W*>(where.get());  // Note [Kernel scratch]: freed in stream order
    FRUGAL_CUDA_FLOAT_SWITCH(dtype, "max_pool2d_backward", {
      max_argmax_kernel<T, W><<<grid_for(ctx, outputs), kThreads, 0, stream>>>(
          geometry(s), static_cast<const T*>(x), w);
      FRUGAL_LAUNCH_CHECK();
      max_backward_kernel<T, W><<<grid_for(ctx, inputs), kThreads, 0, stream>>>(
          geometry(s), w, static_cast<const T*>(dy), static_cast<T*>(dx));
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
  FRUGAL_POOL_LAUNCH("avg_pool2d_backward", avg_backward_kernel, s.n * s.h * s.w * s.c,
                     geometry(s), static_cast<const T*>(dy), static_cast<T*>(dx));
}

void global_avg_pool_forward(const Context& ctx, DType dtype, int64_t n, int64_t hw, int64_t c,
                             const void* x, void* y) {
  FRUGAL_CHECK(n >= 0 && hw > 0 && c > 0, "global_avg_pool_forward: bad shape [", n, ", ", hw,
               ", ", c, "]");
  FRUGAL_POOL_LAUNCH("global_avg_pool_forward", global_avg_forward_kernel, n * c, n, hw, c,
                     static_cast<const T*>(x), static_cast<T*>(y));
}

void global_avg_pool_backward(const Context& ctx, DType dtype, int64_t n, int64_t hw, int64_t c,
                              const void* dy, void* dx) {
  FRUGAL_CHECK(n >= 0 && hw > 0 && c > 0, "global_avg_pool_backward: bad shape [", n, ", ", hw,
               ", ", c, "]");
  FRUGAL_POOL_LAUNCH("global_avg_pool_backward", global_avg_backward_kernel, n * hw * c, n, hw,
                     c, static_cast<const T*>(dy), static_cast<T*>(dx));
}

}  // namespace frugal::kernels::cuda
