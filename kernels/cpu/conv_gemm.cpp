// The general CPU conv (stem 3x3, grouped, strided, dilated): im2col over a chunk of images into
// a workspace, then one Eigen GEMM per group; backward input via GEMM + col2im (a gather, so
// rows of dx are written by one thread each); backward weight via dY^T * columns.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/conv_internal.h"
#include "kernels/cpu/cpu_common.h"

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

// col[nb * P, cols] from x images [n0, n0 + nb): zero where the window reads padding.
template <typename T>
void im2col(const Conv2dShape& s, const Im2col& g, const T* x, int64_t n0, int64_t nb, T* col) {
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
            const T* src = x + ((n * s.h + ih) * s.w + iw) * s.c;
            for (int64_t grp = 0; grp < s.groups; ++grp) {
              T* d = dst + (grp * g.kk + i * s.kw + j) * cg;
              if (inside) {
                std::memcpy(d, src + grp * cg, static_cast<size_t>(cg) * sizeof(T));
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
template <typename T>
void col2im(const Conv2dShape& s, const Im2col& g, const T* dcol, int64_t n0, int64_t nb, T* dx) {
  int64_t cg = s.cin_per_group();
  parallel_for(nb * s.h, std::max<int64_t>(1, 16384 / (s.w * g.cols)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t nl = r / s.h, ih = r % s.h;
      for (int64_t iw = 0; iw < s.w; ++iw) {
        T* __restrict d = dx + (((n0 + nl) * s.h + ih) * s.w + iw) * s.c;
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
      }
    }
  });
}

}  // namespace

// Per chunk and group: Y_g[nb*P, K/g] = Col_g[nb*P, kk*C/g] * W_g[K/g, kk*C/g]^T
template <typename T>
void im2col_forward(const Context& ctx, const Conv2dShape& s, const T* x, const T* w, T* y) {
  Im2col g(s);
  int64_t kg = s.cout_per_group(), wcols = g.kk * s.cin_per_group();
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(g.chunk * g.p * g.cols) * sizeof(T));
  T* col = static_cast<T*>(buf.get());
  for (int64_t n0 = 0; n0 < s.n; n0 += g.chunk) {
    int64_t nb = std::min(g.chunk, s.n - n0), m = nb * g.p;
    im2col(s, g, x, n0, nb, col);
    T* yc = y + n0 * g.p * s.k;
    for (int64_t grp = 0; grp < s.groups; ++grp) {
      mat(yc + grp * kg, m, kg, s.k).noalias() =
          mat(static_cast<const T*>(col) + grp * wcols, m, wcols, g.cols) *
          mat(w + grp * kg * wcols, kg, wcols, wcols).transpose();
    }
  }
}

// dCol_g[nb*P, kk*C/g] = dY_g[nb*P, K/g] * W_g[K/g, kk*C/g], then col2im into dx.
template <typename T>
void im2col_backward_input(const Context& ctx, const Conv2dShape& s, const T* dy, const T* w,
                           T* dx) {
  Im2col g(s);
  int64_t kg = s.cout_per_group(), wcols = g.kk * s.cin_per_group();
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(g.chunk * g.p * g.cols) * sizeof(T));
  T* col = static_cast<T*>(buf.get());
  for (int64_t n0 = 0; n0 < s.n; n0 += g.chunk) {
    int64_t nb = std::min(g.chunk, s.n - n0), m = nb * g.p;
    const T* dyc = dy + n0 * g.p * s.k;
    for (int64_t grp = 0; grp < s.groups; ++grp) {
      mat(col + grp * wcols, m, wcols, g.cols).noalias() =
          mat(dyc + grp * kg, m, kg, s.k) * mat(w + grp * kg * wcols, kg, wcols, wcols);
    }
    col2im(s, g, static_cast<const T*>(col), n0, nb, dx);
  }
}

// dW_g[K/g, kk*C/g] = sum over chunks of dY_g[nb*P, K/g]^T * Col_g[nb*P, kk*C/g]
template <typename T>
void im2col_backward_weight(const Context& ctx, const Conv2dShape& s, const T* x, const T* dy,
                            T* dw) {
  Im2col g(s);
  int64_t kg = s.cout_per_group(), wcols = g.kk * s.cin_per_group();
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(g.chunk * g.p * g.cols) * sizeof(T));
  T* col = static_cast<T*>(buf.get());
  for (int64_t n0 = 0; n0 < s.n; n0 += g.chunk) {
    int64_t nb = std::min(g.chunk, s.n - n0), m = nb * g.p;
    im2col(s, g, x, n0, nb, col);
    const T* dyc = dy + n0 * g.p * s.k;
    for (int64_t grp = 0; grp < s.groups; ++grp) {
      auto dwg = mat(dw + grp * kg * wcols, kg, wcols, wcols);
      auto dyg = mat(dyc + grp * kg, m, kg, s.k);
      auto colg = mat(static_cast<const T*>(col) + grp * wcols, m, wcols, g.cols);
      if (n0 == 0) {
        dwg.noalias() = dyg.transpose() * colg;
      } else {
        dwg.noalias() += dyg.transpose() * colg;
      }
    }
  }
}

#define FRUGAL_INSTANTIATE(T)                                                                 \
  template void im2col_forward<T>(const Context&, const Conv2dShape&, const T*, const T*, T*); \
  template void im2col_backward_input<T>(const Context&, const Conv2dShape&, const T*,        \
                                         const T*, T*);                                       \
  template void im2col_backward_weight<T>(const Context&, const Conv2dShape&, const T*,       \
                                          const T*, T*);
FRUGAL_INSTANTIATE(float)
FRUGAL_INSTANTIATE(double)
#undef FRUGAL_INSTANTIATE

}  // namespace frugal::kernels::cpu
