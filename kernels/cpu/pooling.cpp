// CPU max, average and global average pooling over NHWC, channel innermost. Backward passes run
// one image per task so overlapping windows accumulate into dx without races.
#include "kernels/pooling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/chunks.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/widen.h"

namespace frugal::kernels::cpu {
namespace {

void check_pool(const char* op, const Pool2dShape& s) {
  FRUGAL_CHECK(s.n >= 0 && s.h > 0 && s.w > 0 && s.c > 0 && s.kh > 0 && s.kw > 0 &&
                   s.stride_h > 0 && s.stride_w > 0 && s.pad_h >= 0 && s.pad_w >= 0,
               op, ": bad shape x=[", s.n, ", ", s.h, ", ", s.w, ", ", s.c, "] kernel=", s.kh, "x",
               s.kw, " stride=", s.stride_h, "x", s.stride_w, " padding=", s.pad_h, "x", s.pad_w);
  // As PyTorch: with padding at most half the kernel every window holds a real element.
  FRUGAL_CHECK(2 * s.pad_h <= s.kh && 2 * s.pad_w <= s.kw, op, ": padding ", s.pad_h, "x", s.pad_w,
               " exceeds half the kernel ", s.kh, "x", s.kw);
  FRUGAL_CHECK(s.oh() > 0 && s.ow() > 0, op, ": empty output for x=[", s.n, ", ", s.h, ", ", s.w,
               ", ", s.c, "] kernel=", s.kh, "x", s.kw, " padding=", s.pad_h, "x", s.pad_w);
}

// The window of output (oh, ow), clipped to the input: rows [h0, h1), columns [w0, w1).
struct Window {
  int64_t h0, h1, w0, w1;
  int64_t padded_count;  // the window clipped to the padded input, count_include_pad's divisor
};

Window window(const Pool2dShape& s, int64_t oh, int64_t ow) {
  int64_t hs = oh * s.stride_h - s.pad_h, ws = ow * s.stride_w - s.pad_w;
  int64_t he = std::min(hs + s.kh, s.h + s.pad_h), we = std::min(ws + s.kw, s.w + s.pad_w);
  Window win;
  win.padded_count = (he - hs) * (we - ws);
  win.h0 = std::max<int64_t>(hs, 0);
  win.w0 = std::max<int64_t>(ws, 0);
  win.h1 = std::min(he, s.h);
  win.w1 = std::min(we, s.w);
  return win;
}

// The forwards' common walk: each output pixel's C values start at `init`, take
// combine(y_pixel, x_pixel) over the input pixels of its window (clipped to the input), then
// finish(y_pixel, window).
template <typename T, class Combine, class Finish>
void forward_windows(const Pool2dShape& s, const T* x, T* y, T init, Combine combine,
                     Finish finish) {
  int64_t oh_n = s.oh(), ow_n = s.ow(), c = s.c;
  parallel_for(s.n * oh_n, std::max<int64_t>(1, 8192 / (ow_n * c)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t n = r / oh_n, oh = r % oh_n;
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        Window win = window(s, oh, ow);
        T* __restrict yr = y + (r * ow_n + ow) * c;
        std::fill(yr, yr + c, init);
        for (int64_t ih = win.h0; ih < win.h1; ++ih) {
          for (int64_t iw = win.w0; iw < win.w1; ++iw) {
            combine(yr, x + ((n * s.h + ih) * s.w + iw) * c);
          }
        }
        finish(yr, win);
      }
    }
  });
}

// What an average divides its window's sum by.
int64_t avg_divisor(const Pool2dShape& s, const Window& win) {
  return s.count_include_pad ? win.padded_count : (win.h1 - win.h0) * (win.w1 - win.w0);
}

template <typename T>
void max_forward(const Pool2dShape& s, const T* x, T* y) {
  const int64_t c = s.c;
  forward_windows<T>(
      s, x, y, -std::numeric_limits<T>::infinity(),
      [c](T* __restrict yr, const T* __restrict xr) {
        // NaN propagates (the first NaN sticks: nothing compares greater than it).
        for (int64_t ch = 0; ch < c; ++ch) {
          T v = xr[ch];
          yr[ch] = (v > yr[ch] || std::isnan(v)) && !std::isnan(yr[ch]) ? v : yr[ch];
        }
      },
      [](T*, const Window&) {});
}

// dy of each output goes to the first element of its window equal to the max (same scan order
// and comparison as the forward), so ties and overlapping windows match PyTorch.
template <typename T>
void max_backward(const Context& ctx, const Pool2dShape& s, const T* x, const T* dy, T* dx) {
  int64_t oh_n = s.oh(), ow_n = s.ow(), c = s.c, image = s.h * s.w * c;
  int64_t chunks = chunk_count(s.n, image * s.kh * s.kw);
  // per chunk of images: best value [C] and argmax offset into the image [C]
  size_t slot = (static_cast<size_t>(c) * (sizeof(T) + sizeof(int64_t)) + 63) / 64 * 64;
  memory::DataPtr buf = ctx.workspace(slot * static_cast<size_t>(chunks));
  for_each_chunk(s.n, chunks, [&](int64_t t, int64_t b, int64_t e) {
    auto* base = static_cast<char*>(buf.get()) + slot * static_cast<size_t>(t);
    int64_t* arg = reinterpret_cast<int64_t*>(base);
    T* best = reinterpret_cast<T*>(base + static_cast<size_t>(c) * sizeof(int64_t));
    for (int64_t n = b; n < e; ++n) {
      const T* xi = x + n * image;
      T* dxi = dx + n * image;
      std::fill(dxi, dxi + image, T(0));
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          Window win = window(s, oh, ow);
          std::fill(best, best + c, -std::numeric_limits<T>::infinity());
          std::fill(arg, arg + c, int64_t{-1});
          for (int64_t ih = win.h0; ih < win.h1; ++ih) {
            for (int64_t iw = win.w0; iw < win.w1; ++iw) {
              int64_t off = (ih * s.w + iw) * c;
              for (int64_t ch = 0; ch < c; ++ch) {
                T v = xi[off + ch];
                if (arg[ch] < 0 || ((v > best[ch] || std::isnan(v)) && !std::isnan(best[ch]))) {
                  best[ch] = v;
                  arg[ch] = off + ch;
                }
              }
            }
          }
          const T* dyr = dy + ((n * oh_n + oh) * ow_n + ow) * c;
          for (int64_t ch = 0; ch < c; ++ch) dxi[arg[ch]] += dyr[ch];
        }
      }
    }
  });
}

template <typename T>
void avg_forward(const Pool2dShape& s, const T* x, T* y) {
  const int64_t c = s.c;
  forward_windows<T>(
      s, x, y, T(0),
      [c](T* __restrict yr, const T* __restrict xr) {
        for (int64_t ch = 0; ch < c; ++ch) yr[ch] += xr[ch];
      },
      [&s, c](T* __restrict yr, const Window& win) {
        T inv = T(1) / static_cast<T>(avg_divisor(s, win));
        for (int64_t ch = 0; ch < c; ++ch) yr[ch] *= inv;
      });
}

template <typename T>
void avg_backward(const Pool2dShape& s, const T* dy, T* dx) {
  int64_t oh_n = s.oh(), ow_n = s.ow(), c = s.c, image = s.h * s.w * c;
  parallel_for(s.n, 1, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      T* dxi = dx + n * image;
      std::fill(dxi, dxi + image, T(0));
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          Window win = window(s, oh, ow);
          T inv = T(1) / static_cast<T>(avg_divisor(s, win));
          const T* __restrict dyr = dy + ((n * oh_n + oh) * ow_n + ow) * c;
          for (int64_t ih = win.h0; ih < win.h1; ++ih) {
            for (int64_t iw = win.w0; iw < win.w1; ++iw) {
              T* __restrict d = dxi + (ih * s.w + iw) * c;
              for (int64_t ch = 0; ch < c; ++ch) d[ch] += dyr[ch] * inv;
            }
          }
        }
      }
    }
  });
}

}  // namespace

void max_pool2d_forward(const Context&, DType dtype, const Pool2dShape& s, const void* x, void* y) {
  check_pool("max_pool2d_forward", s);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "max_pool2d_forward",
                          max_forward<T>(s, static_cast<const T*>(x), static_cast<T*>(y)));
}

void max_pool2d_backward(const Context& ctx, DType dtype, const Pool2dShape& s, const void* x,
                         const void* dy, void* dx) {
  check_pool("max_pool2d_backward", s);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "max_pool2d_backward",
                          max_backward<T>(ctx, s, static_cast<const T*>(x),
                                          static_cast<const T*>(dy), static_cast<T*>(dx)));
}

void avg_pool2d_forward(const Context&, DType dtype, const Pool2dShape& s, const void* x, void* y) {
  check_pool("avg_pool2d_forward", s);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "avg_pool2d_forward",
                          avg_forward<T>(s, static_cast<const T*>(x), static_cast<T*>(y)));
}

void avg_pool2d_backward(const Context&, DType dtype, const Pool2dShape& s, const void* dy,
                         void* dx) {
  check_pool("avg_pool2d_backward", s);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "avg_pool2d_backward",
                          avg_backward<T>(s, static_cast<const T*>(dy), static_cast<T*>(dx)));
}

// y[n, c] = mean over hw of x[n, hw, c]
void global_avg_pool_forward(const Context&, DType dtype, int64_t n, int64_t hw, int64_t c,
                             const void* x, void* y) {
  FRUGAL_CHECK(n >= 0 && hw > 0 && c > 0, "global_avg_pool_forward: bad shape [", n, ", ", hw, ", ",
               c, "]");
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "global_avg_pool_forward", {
    using T = typename Num<S>::C;
    auto* xp = static_cast<const S*>(x);
    auto* yp = static_cast<S*>(y);
    T inv = T(1) / static_cast<T>(hw);
    parallel_for(n, std::max<int64_t>(1, 32768 / (hw * c)), [&](int64_t b, int64_t e) {
      RowReader<S> read(c);
      RowWriter<S> write(yp, c);
      for (int64_t i = b; i < e; ++i) {
        T* __restrict yr = write.row(i);
        std::fill(yr, yr + c, T(0));
        for (int64_t p = 0; p < hw; ++p) {
          const T* __restrict xr = read(xp, i * hw + p);
          for (int64_t ch = 0; ch < c; ++ch) yr[ch] += xr[ch];
        }
        for (int64_t ch = 0; ch < c; ++ch) yr[ch] *= inv;
        write.commit(i);
      }
    });
  });
}

// dx[n, hw, c] = dy[n, c] / hw
void global_avg_pool_backward(const Context&, DType dtype, int64_t n, int64_t hw, int64_t c,
                              const void* dy, void* dx) {
  FRUGAL_CHECK(n >= 0 && hw > 0 && c > 0, "global_avg_pool_backward: bad shape [", n, ", ", hw,
               ", ", c, "]");
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "global_avg_pool_backward", {
    using T = typename Num<S>::C;
    auto* dyp = static_cast<const S*>(dy);
    auto* dxp = static_cast<S*>(dx);
    T inv = T(1) / static_cast<T>(hw);
    parallel_for(n, std::max<int64_t>(1, 32768 / (hw * c)), [&](int64_t b, int64_t e) {
      RowReader<S> read(c);
      RowWriter<S> write(dxp, c);
      for (int64_t i = b; i < e; ++i) {
        const T* __restrict dyr = read(dyp, i);
        for (int64_t p = 0; p < hw; ++p) {
          T* __restrict d = write.row(i * hw + p);
          for (int64_t ch = 0; ch < c; ++ch) d[ch] = dyr[ch] * inv;
          write.commit(i * hw + p);
        }
      }
    });
  });
}

}  // namespace frugal::kernels::cpu
