// CPU batch norm over [rows, C] (NHWC flattened), optionally fused with its activation:
// training forward with running-stat update, evaluation forward, recompute from saved
// statistics, and backward. Statistics are summed in double (two passes: mean, then
// squared deviations) with per-chunk partial sums per channel, so rows split over threads.
// x, y, dy and dx may be f16 or bf16 (storage S), computed in f32: bf16 is read and written where
// it is stored, converted element by element inside the vectorised loops (a shift each way), f16
// widened into per-thread buffers and narrowed a block of rows at a time (RowSource and RowSink,
// kernels/cpu/widen.h). The activation is applied element by element inside the same loops
// (kernels/cpu/activation_one.h), so each pass reads x (and dy) once and writes once. Parameters
// and statistics are in the compute type T = Num<S>::C, as acc_dtype says.
#include "kernels/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/activation_one.h"
#include "kernels/cpu/chunks.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/widen.h"

namespace frugal::kernels::cpu {
namespace {

void check_bn(const char* op, int64_t rows, int64_t c) {
  FRUGAL_CHECK(rows >= 0 && c > 0, op, ": bad shape [rows=", rows, ", C=", c, "]");
}

// out[c] = sum over rows of f's terms, accumulated in double per chunk of rows. `f` gets a
// range of rows (begin, end, double* acc) and adds their terms into acc[0..width * C).
template <typename RangeFn>
void channel_sums(const Context& ctx, int64_t rows, int64_t c, int64_t width, double* out,
                  RangeFn&& f) {
  if (rows == 0) {
    std::fill(out, out + width * c, 0.0);
    return;
  }
  int64_t chunks = chunk_count(rows, c * width);
  memory::DataPtr buf = ctx.workspace(static_cast<size_t>(chunks * width * c) * sizeof(double));
  double* partial = static_cast<double*>(buf.get());  // [chunks, width * C]
  for_each_chunk(rows, chunks, [&](int64_t t, int64_t b, int64_t e) {
    double* acc = partial + t * width * c;
    std::fill(acc, acc + width * c, 0.0);
    f(b, e, acc);
  });
  for (int64_t q = 0; q < width * c; ++q) {
    double sum = 0;
    for (int64_t t = 0; t < chunks; ++t) sum += partial[t * width * c + q];
    out[q] = sum;
  }
}

// Calls per_block(xs, n) for rows b .. e - 1 of x ([rows, c]), n <= rows_per_block(c) rows at a
// time, xs their RowElement<S>s.
template <typename S, typename PerBlock>
void for_each_block(const S* x, int64_t c, int64_t b, int64_t e, PerBlock&& per_block) {
  const int64_t block = rows_per_block(c);
  RowSource<S> read(c, block);
  for (int64_t r = b; r < e; r += block) {
    const int64_t n = std::min(block, e - r);
    per_block(read(x, r, n), n);
  }
}

// The loops of the passes below are named functions, one per activation and element type, so
// that each is vectorised with its activation inlined.

// acc[j] += x[i, j] over n rows.
template <typename E>
void add_rows(int64_t n, int64_t c, const E* __restrict xs, double* __restrict acc) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) acc[j] += static_cast<double>(widen1(xs[i * c + j]));
  }
}

// acc[j] += (x[i, j] - mean[j])^2 over n rows.
template <typename E>
void add_squared_deviations(int64_t n, int64_t c, const E* __restrict xs,
                            const double* __restrict mean, double* __restrict acc) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      double d = static_cast<double>(widen1(xs[i * c + j])) - mean[j];
      acc[j] += d * d;
    }
  }
}

// Per-channel affine [mean, scale, beta] from the saved (rounded) statistics, so that the forward
// and a later recompute (batch_norm_act_apply) build the same numbers (Note [Batch norm with its
// activation]).
template <typename T>
void make_affine(int64_t c, const T* mean, const T* invstd, const T* gamma, const T* beta,
                 T* affine) {
  for (int64_t j = 0; j < c; ++j) {
    double g = gamma != nullptr ? static_cast<double>(gamma[j]) : 1.0;
    affine[j] = mean[j];
    affine[c + j] = static_cast<T>(g * static_cast<double>(invstd[j]));
    affine[2 * c + j] = beta != nullptr ? beta[j] : T(0);
  }
}

// u = (x - mean) * scale + beta, bn's output before its activation; (x - mean) is explicit so
// that f32 does not cancel two large terms when |mean| >> std.
template <typename T>
inline T affine_of(T x, const T* affine, int64_t c, int64_t j) {
  return (x - affine[j]) * affine[c + j] + affine[2 * c + j];
}

// y = act(u) over n rows; y may be x itself.
template <Activation act, typename E, typename T>
__attribute__((noinline)) void apply_rows(int64_t n, int64_t c, const E* xs,
                                          const T* __restrict affine, E* ys) {
  for (int64_t i = 0; i < n * c; i += c) {
#pragma GCC ivdep
    for (int64_t j = 0; j < c; ++j) {
      narrow1(forward_one<act>(affine_of(static_cast<T>(widen1(xs[i + j])), affine, c, j)),
              ys[i + j]);
    }
  }
}

// y = act(affine(x)), a block of rows at a time.
template <typename S, typename T = typename Num<S>::C>
void apply_affine(Activation act, int64_t rows, int64_t c, const S* x, const T* affine, S* y) {
  const int64_t block = rows_per_block(c);
  with_activation(act, "batch_norm", [&](auto a) {
    parallel_for(rows, std::max<int64_t>(1, 32768 / c), [&](int64_t b, int64_t e) {
      RowSource<S> read(c, block);
      RowSink<S> write(y, c, block);
      for (int64_t r = b; r < e; r += block) {
        const int64_t n = std::min(block, e - r);
        apply_rows<decltype(a)::value>(n, c, read(x, r, n), affine, write.row(r));
        write.commit(r, n);
      }
    });
  });
}

template <typename S, typename T = typename Num<S>::C>
void forward_train(const Context& ctx, Activation act, int64_t rows, int64_t c, const S* x,
                   const T* gamma, const T* beta, double eps, double momentum, S* y, T* save_mean,
                   T* save_invstd, T* running_mean, T* running_var) {
  memory::DataPtr stats_buf = ctx.workspace(static_cast<size_t>(2 * c) * sizeof(double));
  double* mean = static_cast<double*>(stats_buf.get());  // [C]
  double* var = mean + c;                                // [C], sum of squared deviations
  memory::DataPtr affine_buf = ctx.workspace(static_cast<size_t>(5 * c) * sizeof(T));
  T* affine = static_cast<T*>(affine_buf.get());  // [3, C]: mean, scale, beta
  T* rounded = affine + 3 * c;                    // [2, C]: mean and invstd as saved
  channel_sums(ctx, rows, c, 1, mean, [&](int64_t b, int64_t e, double* acc) {
    for_each_block(x, c, b, e, [&](const auto* xs, int64_t n) { add_rows(n, c, xs, acc); });
  });
  for (int64_t j = 0; j < c; ++j) mean[j] /= static_cast<double>(rows);
  channel_sums(ctx, rows, c, 1, var, [&](int64_t b, int64_t e, double* acc) {
    for_each_block(x, c, b, e,
                   [&](const auto* xs, int64_t n) { add_squared_deviations(n, c, xs, mean, acc); });
  });
  for (int64_t j = 0; j < c; ++j) {
    double biased = var[j] / static_cast<double>(rows);
    rounded[j] = static_cast<T>(mean[j]);
    rounded[c + j] = static_cast<T>(1.0 / std::sqrt(biased + eps));
    if (save_mean != nullptr) save_mean[j] = rounded[j];
    if (save_invstd != nullptr) save_invstd[j] = rounded[c + j];
    // PyTorch: the running variance takes the unbiased estimate.
    double unbiased = var[j] / static_cast<double>(rows - 1);
    if (running_mean != nullptr) {
      running_mean[j] = static_cast<T>((1 - momentum) * running_mean[j] + momentum * mean[j]);
    }
    if (running_var != nullptr) {
      running_var[j] = static_cast<T>((1 - momentum) * running_var[j] + momentum * unbiased);
    }
  }
  if (y == nullptr) return;  // statistics only: batch_norm_act_apply writes y later
  make_affine(c, rounded, rounded + c, gamma, beta, affine);
  apply_affine(act, rows, c, x, affine, y);
}

template <typename S, typename T = typename Num<S>::C>
void forward_eval(const Context& ctx, int64_t rows, int64_t c, const S* x, const T* gamma,
                  const T* beta, const T* running_mean, const T* running_var, double eps, S* y) {
  memory::DataPtr affine_buf = ctx.workspace(static_cast<size_t>(3 * c) * sizeof(T));
  T* affine = static_cast<T*>(affine_buf.get());  // [3, C]: mean, scale, beta
  for (int64_t j = 0; j < c; ++j) {
    double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[j]) + eps);
    double g = gamma != nullptr ? static_cast<double>(gamma[j]) : 1.0;
    affine[j] = running_mean[j];
    affine[c + j] = static_cast<T>(g * invstd);
    affine[2 * c + j] = beta != nullptr ? beta[j] : T(0);
  }
  apply_affine(Activation::identity, rows, c, x, affine, y);
}

template <typename S, typename T = typename Num<S>::C>
void apply_saved(const Context& ctx, Activation act, int64_t rows, int64_t c, const S* x,
                 const T* gamma, const T* beta, const T* mean, const T* invstd, S* y) {
  memory::DataPtr affine_buf = ctx.workspace(static_cast<size_t>(3 * c) * sizeof(T));
  T* affine = static_cast<T*>(affine_buf.get());
  make_affine(c, mean, invstd, gamma, beta, affine);
  apply_affine(act, rows, c, x, affine, y);
}

// The gradient reaching bn's output: act'(u) * dy, u recomputed from x (dy itself for identity).
template <Activation act, typename T>
inline T grad_of(T x, T dy, const T* affine, int64_t c, int64_t j) {
  if constexpr (act == Activation::identity) {
    return dy;
  } else {
    return backward_one<act>(affine_of(x, affine, c, j), dy);
  }
}

// acc[j] += du, acc[c + j] += du * (x - mean) over n rows (du = grad_of).
template <Activation act, typename E, typename T>
__attribute__((noinline)) void add_grad_terms(int64_t n, int64_t c, const E* __restrict xs,
                                              const E* __restrict dys, const T* __restrict affine,
                                              double* __restrict acc) {
  for (int64_t i = 0; i < n * c; i += c) {
    for (int64_t j = 0; j < c; ++j) {
      T xv = widen1(xs[i + j]);
      double g =
          static_cast<double>(grad_of<act>(xv, static_cast<T>(widen1(dys[i + j])), affine, c, j));
      acc[j] += g;
      acc[c + j] += g * (static_cast<double>(xv) - static_cast<double>(affine[j]));
    }
  }
}

// dx = a * du + b * (x - mean) + d over n rows, coef = [a, b, d, mean] per channel; dx may be
// dy itself, element for element.
template <Activation act, typename E, typename T>
__attribute__((noinline)) void grad_input_rows(int64_t n, int64_t c, const E* xs, const E* dys,
                                               const T* __restrict affine, const T* __restrict coef,
                                               E* dxs) {
  const T* ca = coef;
  const T* cb = coef + c;
  const T* cd = coef + 2 * c;
  const T* cm = coef + 3 * c;
  for (int64_t i = 0; i < n * c; i += c) {
#pragma GCC ivdep
    for (int64_t j = 0; j < c; ++j) {
      T xv = widen1(xs[i + j]);
      T g = grad_of<act>(xv, static_cast<T>(widen1(dys[i + j])), affine, c, j);
      narrow1(ca[j] * g + cb[j] * (xv - cm[j]) + cd[j], dxs[i + j]);
    }
  }
}

// With u = bn(x), du = act'(u) * dy, xhat = (x - mean) * invstd, M = rows:
//   dbeta = sum du, dgamma = sum du * xhat,
//   dx = gamma * invstd / M * (M * du - dbeta - xhat * dgamma).
// du is recomputed per element in both passes, never stored.
template <typename S, typename T = typename Num<S>::C>
void backward(const Context& ctx, Activation act, int64_t rows, int64_t c, const S* x, const S* dy,
              const T* gamma, const T* beta, const T* save_mean, const T* save_invstd, S* dx,
              T* dgamma, T* dbeta) {
  memory::DataPtr affine_buf = ctx.workspace(static_cast<size_t>(3 * c) * sizeof(T));
  T* affine = static_cast<T*>(affine_buf.get());
  make_affine(c, save_mean, save_invstd, gamma, beta, affine);
  const int64_t block = rows_per_block(c);
  memory::DataPtr sums_buf = ctx.workspace(static_cast<size_t>(2 * c) * sizeof(double));
  double* sums = static_cast<double*>(sums_buf.get());  // [2, C]: sum du, sum du * (x - mean)
  with_activation(act, "batch_norm_backward", [&](auto a) {
    constexpr Activation kAct = decltype(a)::value;
    channel_sums(ctx, rows, c, 2, sums, [&](int64_t b, int64_t e, double* acc) {
      RowSource<S> read_x(c, block), read_dy(c, block);
      for (int64_t r = b; r < e; r += block) {
        const int64_t n = std::min(block, e - r);
        add_grad_terms<kAct>(n, c, read_x(x, r, n), read_dy(dy, r, n), affine, acc);
      }
    });
  });
  for (int64_t j = 0; j < c; ++j) {
    if (dbeta != nullptr) dbeta[j] = static_cast<T>(sums[j]);
    if (dgamma != nullptr) {
      dgamma[j] = static_cast<T>(sums[c + j] * static_cast<double>(save_invstd[j]));
    }
  }
  if (dx == nullptr) return;
  // dx = a * du + b * (x - mean) + d per channel, folding every constant ahead of the row
  // loop; (x - mean) stays explicit so f32 does not cancel two large terms when |mean| >> std.
  memory::DataPtr coef_buf = ctx.workspace(static_cast<size_t>(4 * c) * sizeof(T));
  T* coef = static_cast<T*>(coef_buf.get());  // [4, C]: a, b, d, mean
  double m = static_cast<double>(rows);
  for (int64_t j = 0; j < c; ++j) {
    double invstd = static_cast<double>(save_invstd[j]);
    double mean = static_cast<double>(save_mean[j]);
    double g = gamma != nullptr ? static_cast<double>(gamma[j]) : 1.0;
    double a = g * invstd;
    double b = -a * sums[c + j] * invstd * invstd / m;  // coefficient of (x - mean)
    coef[j] = static_cast<T>(a);
    coef[c + j] = static_cast<T>(b);
    coef[2 * c + j] = static_cast<T>(-a * sums[j] / m);
    coef[3 * c + j] = static_cast<T>(mean);
  }
  with_activation(act, "batch_norm_backward", [&](auto a) {
    constexpr Activation kAct = decltype(a)::value;
    parallel_for(rows, std::max<int64_t>(1, 32768 / c), [&](int64_t b, int64_t e) {
      RowSource<S> read_x(c, block), read_dy(c, block);
      RowSink<S> write(dx, c, block);
      for (int64_t r = b; r < e; r += block) {
        const int64_t n = std::min(block, e - r);
        grad_input_rows<kAct>(n, c, read_x(x, r, n), read_dy(dy, r, n), affine, coef, write.row(r));
        write.commit(r, n);
      }
    });
  });
}

}  // namespace

void batch_norm_act_forward_train(const Context& ctx, DType dtype, Activation act, int64_t rows,
                                  int64_t c, const void* x, const void* gamma, const void* beta,
                                  double eps, double momentum, void* y, void* save_mean,
                                  void* save_invstd, void* running_mean, void* running_var,
                                  int64_t* batches_tracked) {
  check_bn("batch_norm_forward_train", rows, c);
  if (rows == 0) return;
  FRUGAL_CHECK(rows > 1,
               "batch_norm_forward_train: need more than one value per channel in "
               "training, got [rows=",
               rows, ", C=", c, "]");
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "batch_norm_forward_train", {
    using T = typename Num<S>::C;
    forward_train<S>(ctx, act, rows, c, static_cast<const S*>(x), static_cast<const T*>(gamma),
                     static_cast<const T*>(beta), eps, momentum, static_cast<S*>(y),
                     static_cast<T*>(save_mean), static_cast<T*>(save_invstd),
                     static_cast<T*>(running_mean), static_cast<T*>(running_var));
  });
  if (batches_tracked != nullptr) ++*batches_tracked;
}

void batch_norm_forward_train(const Context& ctx, DType dtype, int64_t rows, int64_t c,
                              const void* x, const void* gamma, const void* beta, double eps,
                              double momentum, void* y, void* save_mean, void* save_invstd,
                              void* running_mean, void* running_var) {
  cpu::batch_norm_act_forward_train(ctx, dtype, Activation::identity, rows, c, x, gamma, beta, eps,
                                    momentum, y, save_mean, save_invstd, running_mean, running_var,
                                    nullptr);
}

void batch_norm_act_apply(const Context& ctx, DType dtype, Activation act, int64_t rows, int64_t c,
                          const void* x, const void* gamma, const void* beta, const void* mean,
                          const void* invstd, void* y) {
  check_bn("batch_norm_act_apply", rows, c);
  if (rows == 0) return;
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "batch_norm_act_apply", {
    using T = typename Num<S>::C;
    apply_saved<S>(ctx, act, rows, c, static_cast<const S*>(x), static_cast<const T*>(gamma),
                   static_cast<const T*>(beta), static_cast<const T*>(mean),
                   static_cast<const T*>(invstd), static_cast<S*>(y));
  });
}

void batch_norm_act_apply_add(const Context& ctx, DType dtype, Activation act, int64_t rows,
                              int64_t c, const void* x, const void* gamma, const void* beta,
                              const void* mean, const void* invstd, const void* residual, void* y) {
  // The two passes the fused CUDA kernel replaces, in their order: y is rounded to dtype before
  // the add, as the unfused forward's stored output was.
  cpu::batch_norm_act_apply(ctx, dtype, act, rows, c, x, gamma, beta, mean, invstd, y);
  const Shape flat{rows * c};
  cpu::binary(ctx, BinaryOp::add, dtype, make_broadcast(flat, flat, flat), residual, y, y);
}

void batch_norm_forward_eval(const Context& ctx, DType dtype, int64_t rows, int64_t c,
                             const void* x, const void* gamma, const void* beta,
                             const void* running_mean, const void* running_var, double eps,
                             void* y) {
  check_bn("batch_norm_forward_eval", rows, c);
  if (rows == 0) return;
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "batch_norm_forward_eval", {
    using T = typename Num<S>::C;
    forward_eval<S>(ctx, rows, c, static_cast<const S*>(x), static_cast<const T*>(gamma),
                    static_cast<const T*>(beta), static_cast<const T*>(running_mean),
                    static_cast<const T*>(running_var), eps, static_cast<S*>(y));
  });
}

void batch_norm_act_backward(const Context& ctx, DType dtype, Activation act, int64_t rows,
                             int64_t c, const void* x, const void* dy, const void* gamma,
                             const void* beta, const void* save_mean, const void* save_invstd,
                             void* dx, void* dgamma, void* dbeta) {
  check_bn("batch_norm_backward", rows, c);
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "batch_norm_backward", {
    using T = typename Num<S>::C;
    backward<S>(ctx, act, rows, c, static_cast<const S*>(x), static_cast<const S*>(dy),
                static_cast<const T*>(gamma), static_cast<const T*>(beta),
                static_cast<const T*>(save_mean), static_cast<const T*>(save_invstd),
                static_cast<S*>(dx), static_cast<T*>(dgamma), static_cast<T*>(dbeta));
  });
}

void batch_norm_backward(const Context& ctx, DType dtype, int64_t rows, int64_t c, const void* x,
                         const void* dy, const void* gamma, const void* save_mean,
                         const void* save_invstd, void* dx, void* dgamma, void* dbeta) {
  cpu::batch_norm_act_backward(ctx, dtype, Activation::identity, rows, c, x, dy, gamma, nullptr,
                               save_mean, save_invstd, dx, dgamma, dbeta);
}

}  // namespace frugal::kernels::cpu
