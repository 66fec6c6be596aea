// CPU kernels of kernels/dim_reduce.h: one pass per (outer, inner) line along the reduced
// dimension; every floating dtype, 16-bit loaded per element and computed in float.
#include "kernels/dim_reduce.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/typed.h"

namespace frugal::kernels::cpu {
namespace {

template <typename S>
void forward_line(DimOp op, int64_t size, int64_t stride, const S* x, void* y_base, int64_t line,
                  int64_t origin) {
  using C = typename Num<S>::C;
  auto at = [&](int64_t j) { return Num<S>::load(x[j * stride]); };
  if (op == DimOp::amax || op == DimOp::argmax) {
    int64_t best = 0;
    C bv = at(0);
    for (int64_t j = 1; j < size && !std::isnan(bv); ++j) {
      C v = at(j);
      if (v > bv || std::isnan(v)) {  // first maximum; NaN wins
        bv = v;
        best = j;
      }
    }
    if (op == DimOp::amax) {
      static_cast<S*>(y_base)[line] = Num<S>::store(bv);
    } else {
      static_cast<int64_t*>(y_base)[line] = best;
    }
    return;
  }
  C m = -INFINITY;
  for (int64_t j = 0; j < size; ++j) m = std::max(m, at(j));
  C total = 0;
  for (int64_t j = 0; j < size; ++j) total += std::exp(at(j) - m);
  S* y = static_cast<S*>(y_base) + origin;
  if (op == DimOp::softmax) {
    for (int64_t j = 0; j < size; ++j) y[j * stride] = Num<S>::store(std::exp(at(j) - m) / total);
  } else {
    C lse = m + std::log(total);
    for (int64_t j = 0; j < size; ++j) y[j * stride] = Num<S>::store(at(j) - lse);
  }
}

template <typename S>
void backward_line(DimOp op, int64_t size, int64_t stride, const S* x, const S* y, const S* dy,
                   S* dx, int64_t line, int64_t origin) {
  using C = typename Num<S>::C;
  if (op == DimOp::amax) {
    x += origin;
    dx += origin;
    C m = Num<S>::load(y[line]), g = Num<S>::load(dy[line]);
    int64_t count = 0;
    for (int64_t j = 0; j < size; ++j) count += Num<S>::load(x[j * stride]) == m ? 1 : 0;
    C share = count > 0 ? g / static_cast<C>(count) : C(0);
    for (int64_t j = 0; j < size; ++j) {
      dx[j * stride] = Num<S>::store(Num<S>::load(x[j * stride]) == m ? share : C(0));
    }
    return;
  }
  y += origin;
  dy += origin;
  dx += origin;
  C dot = 0;
  for (int64_t j = 0; j < size; ++j) {
    C g = Num<S>::load(dy[j * stride]);
    dot += op == DimOp::softmax ? g * Num<S>::load(y[j * stride]) : g;
  }
  for (int64_t j = 0; j < size; ++j) {
    C g = Num<S>::load(dy[j * stride]), v = Num<S>::load(y[j * stride]);
    C r = op == DimOp::softmax ? v * (g - dot) : g - std::exp(v) * dot;
    dx[j * stride] = Num<S>::store(r);
  }
}

// Calls fn(line, origin) for every (outer, inner) line; origin is its first element's offset.
template <typename Fn>
void for_each_line(const DimView& v, Fn fn) {
  const int64_t lines = v.outer * v.inner;
  parallel_for(lines, std::max<int64_t>(1, 16384 / std::max<int64_t>(v.size, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t l = begin; l < end; ++l) {
                   int64_t o = l / v.inner, i = l - o * v.inner;
                   fn(l, o * v.size * v.inner + i);
                 }
               });
}

}  // namespace

void dim_reduce(const Context& ctx, DimOp op, DType dtype, const DimView& v, const void* x,
                void* y) {
  (void)ctx;
  FRUGAL_CHECK(v.size > 0 || op == DimOp::softmax || op == DimOp::log_softmax,
               "dim_reduce: cannot reduce an empty dimension");
  if (v.size == 0) return;
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "dim_reduce", {
    for_each_line(v, [&](int64_t line, int64_t origin) {
      forward_line<S>(op, v.size, v.inner, static_cast<const S*>(x) + origin, y, line, origin);
    });
  });
}

void dim_reduce_backward(const Context& ctx, DimOp op, DType dtype, const DimView& v, const void* x,
                         const void* y, const void* dy, void* dx) {
  (void)ctx;
  FRUGAL_CHECK(op != DimOp::argmax, "dim_reduce_backward: argmax has no gradient");
  if (v.size == 0) return;
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "dim_reduce_backward", {
    for_each_line(v, [&](int64_t line, int64_t origin) {
      backward_line<S>(op, v.size, v.inner, static_cast<const S*>(x), static_cast<const S*>(y),
                       static_cast<const S*>(dy), static_cast<S*>(dx), line, origin);
    });
  });
}

}  // namespace frugal::kernels::cpu
