// CPU reductions: sum_to (the backward of broadcasting, bias gradients, means) and argmax_rows.
// Sums accumulate in double for f32 and f64 alike; contiguous runs are summed pairwise and
// column sums in blocks, so reductions over millions of elements keep their accuracy.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/reduce.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 32768;
constexpr int64_t kBlockRows = 256;  // rows summed into a block partial before the total

// Pairwise sum of n contiguous values in double: 8 independent lanes below the leaf size (so
// the compiler vectorises it), halves above it.
template <typename T>
double pairwise_sum(const T* x, int64_t n) {
  constexpr int64_t kLeaf = 512;
  if (n <= kLeaf) {
    double lane[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) lane[j] += static_cast<double>(x[i + j]);
    }
    double s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; i < n; ++i) s += static_cast<double>(x[i]);
    return s;
  }
  int64_t half = (n / 2 + 7) / 8 * 8;
  return pairwise_sum(x, half) + pairwise_sum(x + half, n - half);
}

// The reduction with size-1 input dims dropped and neighbours of the same kind (reduced or
// kept) merged: alternating groups, outermost first, with their input strides.
struct Groups {
  int n = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  bool reduced[kMaxDims] = {};
};

Groups group(const Reduction& r) {
  Groups g;
  for (int i = 0; i < r.ndim; ++i) {
    if (r.in_dims[i] == 1) continue;
    bool red = r.out_dims[i] == 1;
    if (g.n > 0 && g.reduced[g.n - 1] == red) {
      g.dims[g.n - 1] *= r.in_dims[i];
    } else {
      g.dims[g.n] = r.in_dims[i];
      g.reduced[g.n] = red;
      ++g.n;
    }
  }
  int64_t s = 1;
  for (int i = g.n - 1; i >= 0; --i) {
    g.strides[i] = s;
    s *= g.dims[i];
  }
  return g;
}

// Input offsets of the outer groups (all but the last): kept-group coordinates come from an
// output row index, reduced-group coordinates from a position index. Both enumerate their
// groups row-major, outermost first.
struct Outer {
  int n = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t count = 1;

  int64_t offset(int64_t index) const {
    if (n == 1) return index * strides[0];  // the common case, without divisions
    int64_t off = 0;
    for (int i = n - 1; i >= 0; --i) {
      off += (index % dims[i]) * strides[i];
      index /= dims[i];
    }
    return off;
  }
};

void split_outer(const Groups& g, Outer& kept, Outer& red) {
  for (int i = 0; i + 1 < g.n; ++i) {
    Outer& o = g.reduced[i] ? red : kept;
    o.dims[o.n] = g.dims[i];
    o.strides[o.n] = g.strides[i];
    o.count *= g.dims[i];
    ++o.n;
  }
}

// Last group reduced: y[o] = sum over reduced outer positions of a contiguous run of `inner`.
template <typename T>
void sum_inner_reduced(const Context& ctx, const Groups& g, const T* x, double scale, T* y) {
  Outer kept, red;
  split_outer(g, kept, red);
  const int64_t inner = g.dims[g.n - 1];
  const int64_t rows = kept.count;  // == output elements
  auto row_sum = [&](int64_t o, int64_t p_begin, int64_t p_end) {
    const T* base = x + kept.offset(o);
    double s = 0;
    for (int64_t p = p_begin; p < p_end; ++p) s += pairwise_sum(base + red.offset(p), inner);
    return s;
  };
  int threads = omp_get_max_threads();
  if (rows >= threads || rows * red.count * inner <= kGrain) {
    parallel_for(rows, std::max<int64_t>(1, kGrain / (inner * red.count)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     y[o] = static_cast<T>(scale * row_sum(o, 0, red.count));
                   }
                 });
    return;
  }
  // Few outputs (a full reduction): split each one's work into chunks, then add the chunks.
  const bool split_positions = red.count >= threads;
  const int64_t chunks = threads;
  memory::DataPtr ws = ctx.workspace(static_cast<size_t>(rows * chunks) * sizeof(double));
  double* part = static_cast<double*>(ws.get());
  parallel_for(rows * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t o = t / chunks, c = t % chunks;
      if (split_positions) {
        part[t] = row_sum(o, red.count * c / chunks, red.count * (c + 1) / chunks);
      } else {  // one position or a few: split the contiguous run
        const T* base = x + kept.offset(o);
        int64_t lo = inner * c / chunks, hi = inner * (c + 1) / chunks;
        double s = 0;
        for (int64_t p = 0; p < red.count; ++p) s += pairwise_sum(base + red.offset(p) + lo, hi - lo);
        part[t] = s;
      }
    }
  });
  for (int64_t o = 0; o < rows; ++o) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += part[o * chunks + c];
    y[o] = static_cast<T>(scale * s);
  }
}

// acc[0, k) += sum of rows [p_begin, p_end) of the [positions, k] column problem at `base`,
// summed in blocks of kBlockRows (block partial in blk, then added to acc).
template <typename T>
void column_sum(const T* base, const Outer& red, int64_t k, int64_t p_begin, int64_t p_end,
                double* __restrict acc, double* __restrict blk) {
  for (int64_t p0 = p_begin; p0 < p_end; p0 += kBlockRows) {
    int64_t p1 = std::min(p_end, p0 + kBlockRows);
    std::fill(blk, blk + k, 0.0);
    for (int64_t p = p0; p < p1; ++p) {
      const T* __restrict row = base + red.offset(p);
      for (int64_t j = 0; j < k; ++j) blk[j] += static_cast<double>(row[j]);
    }
    for (int64_t j = 0; j < k; ++j) acc[j] += blk[j];
  }
}

// Last group kept (k values per output row): y[o, :] = sum over reduced positions of rows.
template <typename T>
void sum_inner_kept(const Context& ctx, const Groups& g, const T* x, double scale, T* y) {
  Outer kept, red;
  split_outer(g, kept, red);
  const int64_t k = g.dims[g.n - 1];
  const int64_t rows = kept.count;
  const int threads = omp_get_max_threads();
  const bool split_positions = rows < threads && rows * red.count * k > kGrain;
  if (!split_positions) {
    // One accumulator pair per chunk of output rows (not per OpenMP thread id, which is not a
    // dense index when this runs nested inside another parallel loop).
    const int64_t chunks = rows * red.count * k <= kGrain ? 1 : std::min<int64_t>(threads, rows);
    memory::DataPtr ws = ctx.workspace(static_cast<size_t>(chunks * 2 * k) * sizeof(double));
    double* buf = static_cast<double*>(ws.get());
    parallel_for(chunks, 1, [&](int64_t c_begin, int64_t c_end) {
      for (int64_t c = c_begin; c < c_end; ++c) {
        double* acc = buf + 2 * k * c;
        double* blk = acc + k;
        for (int64_t o = rows * c / chunks; o < rows * (c + 1) / chunks; ++o) {
          std::fill(acc, acc + k, 0.0);
          column_sum(x + kept.offset(o), red, k, 0, red.count, acc, blk);
          T* out = y + o * k;
          for (int64_t j = 0; j < k; ++j) out[j] = static_cast<T>(scale * acc[j]);
        }
      }
    });
    return;
  }
  // Few output rows (bias gradients: one row): split the reduced positions across threads.
  const int64_t chunks = std::min<int64_t>(threads, red.count);
  memory::DataPtr ws = ctx.workspace(static_cast<size_t>(rows * chunks * 2 * k) * sizeof(double));
  double* buf = static_cast<double*>(ws.get());
  parallel_for(rows * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t o = t / chunks, c = t % chunks;
      double* acc = buf + 2 * k * t;
      std::fill(acc, acc + k, 0.0);
      column_sum(x + kept.offset(o), red, k, red.count * c / chunks, red.count * (c + 1) / chunks,
                 acc, acc + k);
    }
  });
  for (int64_t o = 0; o < rows; ++o) {
    T* out = y + o * k;
    for (int64_t j = 0; j < k; ++j) {
      double s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += buf[2 * k * (o * chunks + c) + j];
      out[j] = static_cast<T>(scale * s);
    }
  }
}

template <typename T>
void sum_to_impl(const Context& ctx, const Reduction& r, const T* x, double scale, T* y) {
  if (r.out_numel == 0) return;
  if (r.in_numel == 0) {  // sums over empty dims are 0
    std::fill(y, y + r.out_numel, T(0));
    return;
  }
  const Groups g = group(r);
  if (g.n == 0) {  // a single element
    y[0] = static_cast<T>(scale * static_cast<double>(x[0]));
    return;
  }
  if (g.n == 1 && !g.reduced[0]) {  // nothing reduced: a scaled copy
    parallel_for(r.in_numel, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = static_cast<T>(scale * static_cast<double>(x[i]));
    });
    return;
  }
  if (g.reduced[g.n - 1]) {
    sum_inner_reduced(ctx, g, x, scale, y);
  } else {
    sum_inner_kept(ctx, g, x, scale, y);
  }
}

template <typename T>
void argmax_impl(int64_t rows, int64_t cols, const T* x, int64_t* out) {
  parallel_for(rows, std::max<int64_t>(1, kGrain / cols), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * cols;
      int64_t best = 0;
      T bv = row[0];
      if (!std::isnan(bv)) {
        for (int64_t j = 1; j < cols; ++j) {
          T v = row[j];
          if (v > bv || std::isnan(v)) {  // NaN counts as the maximum, as in PyTorch
            bv = v;
            best = j;
            if (std::isnan(v)) break;
          }
        }
      }
      out[i] = best;
    }
  });
}

}  // namespace

void sum_to(const Context& ctx, DType dtype, const Reduction& r, const void* x, double scale,
            void* y) {
  FRUGAL_CHECK(r.ndim >= 0 && r.ndim <= kMaxDims, "sum_to: bad reduction rank ", r.ndim);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "sum_to",
                          sum_to_impl<T>(ctx, r, static_cast<const T*>(x), scale,
                                         static_cast<T*>(y)));
}

void argmax_rows(const Context& ctx, DType dtype, int64_t rows, int64_t cols, const void* x,
                 int64_t* out) {
  (void)ctx;
  FRUGAL_CHECK(rows >= 0 && cols >= 0, "argmax_rows: bad size [", rows, ", ", cols, "]");
  if (rows == 0) return;
  FRUGAL_CHECK(cols > 0, "argmax_rows: cannot take the argmax of empty rows [", rows, ", 0]");
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "argmax_rows",
                          argmax_impl<T>(rows, cols, static_cast<const T*>(x), out));
}

}  // namespace frugal::kernels::cpu
