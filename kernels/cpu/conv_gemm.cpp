// The general CPU conv (stem 3x3, grouped, strided, dilated): im2col over a chunk of images into
// a workspace, then one Eigen GEMM per group; backward input via GEMM + col2im (a gather, so
// rows of dx are written by one thread each); backward weight via dY^T * columns.
// 16-bit tensors (storage S) are widened while the columns are gathered, dY a chunk at a time,
// and outputs narrowed from an f32 chunk: the GEMMs always run in the compute type T.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/conv_internal.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/widen.h"

namespace frugal::kernels::cpu {
namespace {

// Column buffers are capped at this many elements (16 MiB of f32); a chunk holds at least one
// image. MobileNet's 32x32 stem fits a batch of 128 in about two chunks.
constexpr int64_t kMaxColumnElements = int64_t{1} << 22;

struct Im2col {
  int64_t oh, ow, p;  // output rows, columns, pixels per image
  int64_t kk;         // kh * kw
  int64_t cols;       // kh * kw * C: one row of the column matrix, [groups, kh, kw, C/groups]
  int64_t chunk;      // images per chunk

  explicit Im2col(const Conv2dShape& s)
      : oh(s.oh()), ow(s.ow()), p(oh * ow), kk(s.kh * s.kw), cols(kk * s.c) {
    chunk = std::clamp<int64_t>(kMaxColumnElements / std::max<int64_t>(p * cols, 1), 1, s.n);
  }
};

// col[nb * P, cols] from x images [n0, n0 + nb), in the compute type T: zero where the window
// reads padding.
template <typename S, typename T = typename Num<S>::C>
void im2col(const Conv2dShape& s, const Im2col& g, const S* x, int64_t n0, int64_t nb, T* col) {
  int64_t cg = s.cin_per_group();
  parallel_for(nb * g.oh, std::max<int64_t>(1, 16384 / (g.ow * g.cols)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t n = n0 + r / g.oh, oh = r % g.oh;
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        T* dst = col + (r * g.ow + ow) * g.cols;
        for (int64_t i = 0; i < s.kh; ++i) {
          int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
          for (int64_t j = 0; j < s.kw; ++j) {
            int64_t iw = ow * s.stride_w - s.pad_w + j * s.dil_w;
            bool inside = ih >= 0 && ih < s.h && iw >= 0 && iw < s.w;
            const S* src = x + ((n * s.h + ih) * s.w + iw) * s.c;
            for (int64_t grp = 0; grp < s.groups; ++grp) {
              T* d = dst + (grp * g.kk + i * s.kw + j) * cg;
              if (inside && cg < 8) {  // a stem's few channels: no call per pixel and tap
                for (int64_t q = 0; q < cg; ++q) d[q] = Num<S>::load(src[grp * cg + q]);
              } else if (inside) {
                widen(src + grp * cg, cg, d);
              } else {
                std::fill(d, d + cg, T(0));
              }
            }
          }
        }
      }
    }
  });
}

// dx images [n0, n0 + nb) = col2im(dcol[nb * P, cols]); every input pixel gathers the column
// entries that read it, so the result is overwritten, not accumulated.
template <typename S, typename T = typename Num<S>::C>
void col2im(const Conv2dShape& s, const Im2col& g, const T* dcol, int64_t n0, int64_t nb, S* dx) {
  int64_t cg = s.cin_per_group();
  parallel_for(nb * s.h, std::max<int64_t>(1, 16384 / (s.w * g.cols)), [&](int64_t b, int64_t e) {
    RowWriter<S> write(dx, s.c);
    for (int64_t r = b; r < e; ++r) {
      int64_t nl = r / s.h, ih = r % s.h;
      for (int64_t iw = 0; iw < s.w; ++iw) {
        const int64_t pixel = ((n0 + nl) * s.h + ih) * s.w + iw;
        T* __restrict d = write.row(pixel);
        std::fill(d, d + s.c, T(0));
        for (int64_t i = 0; i < s.kh; ++i) {
          int64_t th = ih + s.pad_h - i * s.dil_h;
          if (th < 0 || th % s.stride_h != 0 || th / s.stride_h >= g.oh) continue;
          int64_t oh = th / s.stride_h;
          for (int64_t j = 0; j < s.kw; ++j) {
            int64_t tw = iw + s.pad_w - j * s.dil_w;
            if (tw < 0 || tw % s.stride_w != 0 || tw / s.stride_w >= g.ow) continue;
            int64_t ow = tw / s.stride_w;
            const T* src = dcol + ((nl * g.oh + oh) * g.ow + ow) * g.cols;
            for (int64_t grp = 0; grp < s.groups; ++grp) {
              const T* __restrict sg = src + (grp * g.kk + i * s.kw + j) * cg;
              T* __restrict dg = d + grp * cg;
              for (int64_t c = 0; c < cg; ++c) dg[c] += sg[c];
            }
          }
        }
        write.commit(pixel);
      }
    }
  });
}

// An f32 copy of rows [r0, r0 + rows) of a 16-bit [*, cols] matrix in `buf`, or the rows
// themselves when S is the compute type.
template <typename S, typename T = typename Num<S>::C>
const T* widened_rows(const S* a, int64_t r0, int64_t rows, int64_t cols, T* buf) {
  if constexpr (is_narrow_v<S>) {
    parallel_for(rows, std::max<int64_t>(1, 32768 / cols), [&](int64_t b, int64_t e) {
      widen(a + (r0 + b) * cols, (e - b) * cols, buf + b * cols);
    });
    return buf;
  } else {
    return a + r0 * cols;
  }
}

// out rows [r0, r0 + rows) = buf, narrowed; nothing to do when the GEMM wrote out directly.
template <typename S, typename T = typename Num<S>::C>
void narrowed_rows(const T* buf, int64_t r0, int64_t rows, int64_t cols, S* out) {
  if constexpr (is_narrow_v<S>) {
    parallel_for(rows, std::max<int64_t>(1, 32768 / cols), [&](int64_t b, int64_t e) {
      narrow(buf + b * cols, (e - b) * cols, out + (r0 + b) * cols);
    });
  }
}

// Where a GEMM writes rows [r0, ...) of an output: straight into it, or into the f32 chunk
// buffer that narrowed_rows then stores.
template <typename S, typename T = typename Num<S>::C>
T* gemm_target(S* out, int64_t r0, int64_t cols, T* buf) {
  if constexpr (is_narrow_v<S>) {
    return buf;
  } else {
    return out + r0 * cols;
  }
}

}  // namespace

// Per chunk and group: Y_g[nb*P, K/g] = Col_g[nb*P, kk*C/g] * W_g[K/g, kk*C/g]^T (+ bias,
// added to each chunk before it is rounded to 16 bits).
template <typename S>
void im2col_forward(const Context& ctx, const Conv2dShape& s, const S* x, const S* w_in,
                    const S* bias_in, S* y) {
  using T = typename Num<S>::C;
  Im2col g(s);
  int64_t kg = s.cout_per_group(), wcols = g.kk * s.cin_per_group();
  const int64_t w_numel = s.k * wcols;
  // 16-bit: the widened weights and bias, and an f32 chunk of y to narrow
  const int64_t extra = is_narrow_v<S> ? w_numel + s.k + g.chunk * g.p * s.k : 0;
  memory::DataPtr buf =
      ctx.workspace(static_cast<size_t>(g.chunk * g.p * g.cols + extra) * sizeof(T));
  T* col = static_cast<T*>(buf.get());
  T* ybuf = col + g.chunk * g.p * g.cols;
  T* wbuf = is_narrow_v<S> ? ybuf + g.chunk * g.p * s.k : nullptr;
  const T* w = widened_rows(w_in, 0, s.k, wcols, wbuf);
  // wbuf is null for f32 and f64, whose rows are read in place: no offset from it then (UB).
  T* bias_buf = is_narrow_v<S> ? wbuf + w_numel : nullptr;
  const T* bias = bias_in != nullptr ? widened_rows(bias_in, 0, 1, s.k, bias_buf) : nullptr;
  for (int64_t n0 = 0; n0 < s.n; n0 += g.chunk) {
    int64_t nb = std::min(g.chunk, s.n - n0), m = nb * g.p;
    im2col(s, g, x, n0, nb, col);
    T* yc = gemm_target(y, n0 * g.p, s.k, ybuf);
    for (int64_t grp = 0; grp < s.groups; ++grp) {
      mat(yc + grp * kg, m, kg, s.k).noalias() =
          mat(static_cast<const T*>(col) + grp * wcols, m, wcols, g.cols) *
          mat(w + grp * kg * wcols, kg, wcols, wcols).transpose();
    }
    if (bias != nullptr) add_bias(m, s.k, bias, yc);
    narrowed_rows(static_cast<const T*>(ybuf), n0 * g.p, m, s.k, y);
  }
}

// dCol_g[nb*P, kk*C/g] = dY_g[nb*P, K/g] * W_g[K/g, kk*C/g], then col2im into dx.
template <typename S>
void im2col_backward_input(const Context& ctx, const Conv2dShape& s, const S* dy, const S* w_in,
                           S* dx) {
  using T = typename Num<S>::C;
  Im2col g(s);
  int64_t kg = s.cout_per_group(), wcols = g.kk * s.cin_per_group();
  const int64_t w_numel = s.k * wcols;
  // 16-bit: the widened weights, and an f32 chunk of dy
  const int64_t extra = is_narrow_v<S> ? w_numel + g.chunk * g.p * s.k : 0;
  memory::DataPtr buf =
      ctx.workspace(static_cast<size_t>(g.chunk * g.p * g.cols + extra) * sizeof(T));
  T* col = static_cast<T*>(buf.get());
  T* dybuf = col + g.chunk * g.p * g.cols;
  T* wbuf = is_narrow_v<S> ? dybuf + g.chunk * g.p * s.k : nullptr;
  const T* w = widened_rows(w_in, 0, s.k, wcols, wbuf);
  for (int64_t n0 = 0; n0 < s.n; n0 += g.chunk) {
    int64_t nb = std::min(g.chunk, s.n - n0), m = nb * g.p;
    const T* dyc = widened_rows(dy, n0 * g.p, m, s.k, dybuf);
    for (int64_t grp = 0; grp < s.groups; ++grp) {
      mat(col + grp * wcols, m, wcols, g.cols).noalias() =
          mat(dyc + grp * kg, m, kg, s.k) * mat(w + grp * kg * wcols, kg, wcols, wcols);
    }
    col2im(s, g, static_cast<const T*>(col), n0, nb, dx);
  }
}

// dW_g[K/g, kk*C/g] = sum over chunks of dY_g[nb*P, K/g]^T * Col_g[nb*P, kk*C/g]; dw is stored
// in D: S, or f32 for 16-bit S.
template <typename S, typename D>
void im2col_backward_weight(const Context& ctx, const Conv2dShape& s, const S* x, const S* dy,
                            D* dw_out) {
  using T = typename Num<S>::C;
  Im2col g(s);
  int64_t kg = s.cout_per_group(), wcols = g.kk * s.cin_per_group();
  const int64_t w_numel = s.k * wcols;
  // 16-bit: an f32 chunk of dy, and dw in f32 until it is stored
  const int64_t extra = is_narrow_v<S> ? g.chunk * g.p * s.k + w_numel : 0;
  memory::DataPtr buf =
      ctx.workspace(static_cast<size_t>(g.chunk * g.p * g.cols + extra) * sizeof(T));
  T* col = static_cast<T*>(buf.get());
  T* dybuf = col + g.chunk * g.p * g.cols;
  T* dw = nullptr;
  if constexpr (std::is_same_v<D, T>) {
    dw = dw_out;
  } else {
    dw = dybuf + g.chunk * g.p * s.k;
  }
  for (int64_t n0 = 0; n0 < s.n; n0 += g.chunk) {
    int64_t nb = std::min(g.chunk, s.n - n0), m = nb * g.p;
    im2col(s, g, x, n0, nb, col);
    const T* dyc = widened_rows(dy, n0 * g.p, m, s.k, dybuf);
    for (int64_t grp = 0; grp < s.groups; ++grp) {
      gemm_tn_split_depth(ctx, m, kg, wcols, dyc + grp * kg, s.k,
                          static_cast<const T*>(col) + grp * wcols, g.cols, dw + grp * kg * wcols,
                          n0 > 0);
    }
  }
  if constexpr (!std::is_same_v<D, T>) narrow(static_cast<const T*>(dw), w_numel, dw_out);
}

#define FRUGAL_INSTANTIATE(S)                                                                    \
  template void im2col_forward<S>(const Context&, const Conv2dShape&, const S*, const S*,        \
                                  const S*, S*);                                                 \
  template void im2col_backward_input<S>(const Context&, const Conv2dShape&, const S*, const S*, \
                                         S*);                                                    \
  template void im2col_backward_weight<S, S>(const Context&, const Conv2dShape&, const S*,       \
                                             const S*, S*);
FRUGAL_INSTANTIATE(float)
FRUGAL_INSTANTIATE(double)
FRUGAL_INSTANTIATE(f16_t)
FRUGAL_INSTANTIATE(bf16_t)
#undef FRUGAL_INSTANTIATE
template void im2col_backward_weight<f16_t, float>(const Context&, const Conv2dShape&, const f16_t*,
                                                   const f16_t*, float*);
template void im2col_backward_weight<bf16_t, float>(const Context&, const Conv2dShape&,
                                                    const bf16_t*, const bf16_t*, float*);

}  // namespace frugal::kernels::cpu
