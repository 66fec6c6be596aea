// Direct depthwise conv (groups == C == K) in NHWC: the channel is the inner, contiguous,
// vectorised loop; weights are first transposed from [C, kh, kw, 1] to [kh, kw, C] so every tap
// is a contiguous channel vector too. 16-bit tensors (storage S) are read an image row at a time
// into f32 buffers, one per kernel row (so an element is widened kh times, not kh*kw), and
// written back an image row at a time (kernels/cpu/widen.h).
#include <algorithm>
#include <vector>

#include "kernels/cpu/chunks.h"
#include "kernels/cpu/conv_internal.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/widen.h"

namespace frugal::kernels::cpu {
namespace {

// wt[kh*kw, C] from w[C, kh*kw], in the compute type
template <typename S>
void transpose_taps(const S* w, int64_t c, int64_t kk, typename Num<S>::C* wt) {
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t t = 0; t < kk; ++t) wt[t * c + ch] = Num<S>::load(w[ch * kk + t]);
  }
}

// y[i] += a[i] * b[i], one channel vector (vectorised by the compiler)
template <typename T>
inline void fma_row(T* __restrict y, const T* __restrict a, const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a[i] * b[i];
}

int64_t row_grain(const Conv2dShape& s, int64_t width) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, width * s.c * s.kh * s.kw));
}

}  // namespace

template <typename S>
void depthwise_forward(const Context& ctx, const Conv2dShape& s, const S* x, const S* w,
                       const S* bias, S* y) {
  using T = typename Num<S>::C;
  int64_t oh_n = s.oh(), ow_n = s.ow(), c = s.c, kk = s.kh * s.kw;
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>((kk + 1) * c) * sizeof(T));
  T* wt = static_cast<T*>(buf.get());
  T* bias_c = wt + kk * c;  // bias in the compute type
  transpose_taps(w, c, kk, wt);
  if (bias != nullptr) widen(bias, c, bias_c);
  parallel_for(s.n * oh_n, row_grain(s, ow_n), [&](int64_t b, int64_t e) {
    RowWriter<S> write(y, c, ow_n);  // one output image row at a time
    std::vector<RowReader<S>> read(static_cast<size_t>(s.kh), RowReader<S>(c, s.w));
    std::vector<const T*> x_rows(static_cast<size_t>(s.kh));  // the input row of each kernel row
    for (int64_t r = b; r < e; ++r) {
      int64_t n = r / oh_n, oh = r % oh_n;
      for (int64_t i = 0; i < s.kh; ++i) {
        int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
        x_rows[i] = ih < 0 || ih >= s.h ? nullptr : read[i](x, (n * s.h + ih) * s.w, s.w);
      }
      T* y_row = write.row(r * ow_n);
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        T* yr = y_row + ow * c;
        if (bias != nullptr) {
          std::copy(bias_c, bias_c + c, yr);
        } else {
          std::fill(yr, yr + c, T(0));
        }
        for (int64_t i = 0; i < s.kh; ++i) {
          if (x_rows[i] == nullptr) continue;
          for (int64_t j = 0; j < s.kw; ++j) {
            int64_t iw = ow * s.stride_w - s.pad_w + j * s.dil_w;
            if (iw < 0 || iw >= s.w) continue;
            fma_row(yr, x_rows[i] + iw * c, wt + (i * s.kw + j) * c, c);
          }
        }
      }
      write.commit(r * ow_n, ow_n);
    }
  });
}

// dx[n, ih, iw, c] gathers dy[n, oh, ow, c] * w[c, i, j] over the taps that read (ih, iw).
template <typename S>
void depthwise_backward_input(const Context& ctx, const Conv2dShape& s, const S* dy, const S* w,
                              S* dx) {
  using T = typename Num<S>::C;
  int64_t oh_n = s.oh(), ow_n = s.ow(), c = s.c, kk = s.kh * s.kw;
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(kk * c) * sizeof(T));
  T* wt = static_cast<T*>(buf.get());
  transpose_taps(w, c, kk, wt);
  parallel_for(s.n * s.h, row_grain(s, s.w), [&](int64_t b, int64_t e) {
    RowWriter<S> write(dx, c, s.w);  // one input image row at a time
    std::vector<RowReader<S>> read(static_cast<size_t>(s.kh), RowReader<S>(c, ow_n));
    std::vector<const T*> dy_rows(static_cast<size_t>(s.kh));  // the dy row of each kernel row
    for (int64_t r = b; r < e; ++r) {
      int64_t n = r / s.h, ih = r % s.h;
      for (int64_t i = 0; i < s.kh; ++i) {
        int64_t th = ih + s.pad_h - i * s.dil_h;
        const bool reads = th >= 0 && th % s.stride_h == 0 && th / s.stride_h < oh_n;
        dy_rows[i] = reads ? read[i](dy, (n * oh_n + th / s.stride_h) * ow_n, ow_n) : nullptr;
      }
      T* dx_row = write.row(r * s.w);
      for (int64_t iw = 0; iw < s.w; ++iw) {
        T* dxr = dx_row + iw * c;
        std::fill(dxr, dxr + c, T(0));
        for (int64_t i = 0; i < s.kh; ++i) {
          if (dy_rows[i] == nullptr) continue;
          for (int64_t j = 0; j < s.kw; ++j) {
            int64_t tw = iw + s.pad_w - j * s.dil_w;
            if (tw < 0 || tw % s.stride_w != 0 || tw / s.stride_w >= ow_n) continue;
            int64_t ow = tw / s.stride_w;
            fma_row(dxr, dy_rows[i] + ow * c, wt + (i * s.kw + j) * c, c);
          }
        }
      }
      write.commit(r * s.w, s.w);
    }
  });
}

// dw[c, i, j] = sum over n, oh, ow of dy[n, oh, ow, c] * x[n, ih, iw, c]; each chunk of output
// rows sums into its own [kh*kw, C] slot of the workspace, reduced in chunk order at the end.
// dw is stored in D: S, or f32 for 16-bit S (autocast's parameter gradients).
template <typename S, typename D>
void depthwise_backward_weight(const Context& ctx, const Conv2dShape& s, const S* x, const S* dy,
                               D* dw) {
  using T = typename Num<S>::C;
  int64_t oh_n = s.oh(), ow_n = s.ow(), c = s.c, kk = s.kh * s.kw;
  int64_t rows = s.n * oh_n;
  int64_t chunks = chunk_count(rows, ow_n * c * kk);
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(chunks * kk * c) * sizeof(T));
  T* partial = static_cast<T*>(buf.get());  // [chunks, kh*kw, C]
  for_each_chunk(rows, chunks, [&](int64_t t, int64_t b, int64_t e) {
    T* acc = partial + t * kk * c;
    std::fill(acc, acc + kk * c, T(0));
    RowReader<S> read_dy(c, ow_n);
    std::vector<RowReader<S>> read_x(static_cast<size_t>(s.kh), RowReader<S>(c, s.w));
    std::vector<const T*> x_rows(static_cast<size_t>(s.kh));  // the input row of each kernel row
    for (int64_t r = b; r < e; ++r) {
      int64_t n = r / oh_n, oh = r % oh_n;
      const T* dy_row = read_dy(dy, r * ow_n, ow_n);
      for (int64_t i = 0; i < s.kh; ++i) {
        int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
        x_rows[i] = ih < 0 || ih >= s.h ? nullptr : read_x[i](x, (n * s.h + ih) * s.w, s.w);
      }
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const T* dyr = dy_row + ow * c;
        for (int64_t i = 0; i < s.kh; ++i) {
          if (x_rows[i] == nullptr) continue;
          for (int64_t j = 0; j < s.kw; ++j) {
            int64_t iw = ow * s.stride_w - s.pad_w + j * s.dil_w;
            if (iw < 0 || iw >= s.w) continue;
            fma_row(acc + (i * s.kw + j) * c, x_rows[i] + iw * c, dyr, c);
          }
        }
      }
    }
  });
  for (int64_t t = 1; t < chunks; ++t) {
    const T* __restrict src = partial + t * kk * c;
    T* __restrict dst = partial;
    for (int64_t q = 0; q < kk * c; ++q) dst[q] += src[q];
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t q = 0; q < kk; ++q) dw[ch * kk + q] = Num<D>::store(partial[q * c + ch]);
  }
}

#define FRUGAL_INSTANTIATE(S)                                                                 \
  template void depthwise_forward<S>(const Context&, const Conv2dShape&, const S*, const S*,  \
                                     const S*, S*);                                           \
  template void depthwise_backward_input<S>(const Context&, const Conv2dShape&, const S*,     \
                                            const S*, S*);                                    \
  template void depthwise_backward_weight<S, S>(const Context&, const Conv2dShape&, const S*, \
                                                const S*, S*);
FRUGAL_INSTANTIATE(float)
FRUGAL_INSTANTIATE(double)
FRUGAL_INSTANTIATE(f16_t)
FRUGAL_INSTANTIATE(bf16_t)
#undef FRUGAL_INSTANTIATE
template void depthwise_backward_weight<f16_t, float>(const Context&, const Conv2dShape&,
                                                      const f16_t*, const f16_t*, float*);
template void depthwise_backward_weight<bf16_t, float>(const Context&, const Conv2dShape&,
                                                       const bf16_t*, const bf16_t*, float*);

}  // namespace frugal::kernels::cpu
