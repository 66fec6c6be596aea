// CPU batch norm over [rows, C] (NHWC flattened), optionally fused with its activation:
// training forward with running-stat update, evaluation forward, recompute from saved
// statistics, and backward. Statistics are summed in double (two passes: mean, then
// squared deviations) with per-chunk partial sums per channel, so rows split over threads.
// x, y, dy and dx may be f16 or bf16 (storage S): rows are widened into per-thread f32 buffers
// and results narrowed a block of rows at a time (kernels/cpu/widen.h), so that the conversions,
// the fused activation's call and the loop tails are paid per block, not per row of a few dozen
// channels; parameters and statistics are in the compute type T = Num<S>::C, as acc_dtype says.
#include "kernels/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/activation_serial.h"
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

// Calls per_row(row) for rows b .. e - 1 of x ([rows, c]) in the compute type, widened a block
// of rows at a time.
template <typename S, typename PerRow>
void for_each_row(const S* x, int64_t c, int64_t b, int64_t e, PerRow&& per_row) {
  const int64_t block = rows_per_block(c);
  RowReader<S> read(c, block);
  for (int64_t r = b; r < e; r += block) {
    const int64_t n = std::min(block, e - r);
    const auto* xs = read(x, r, n);
    for (int64_t i = 0; i < n; ++i) per_row(xs + i * c);
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

// u = (x - mean) * scale + beta for one row; (x - mean) is explicit so that f32 does not cancel
// two large terms when |mean| >> std.
template <typename T>
inline void affine_row(int64_t c, const T* __restrict xr, const T* __restrict affine,
                       T* __restrict ur) {
  const T* mean = affine;
  const T* scale = affine + c;
  const T* beta = affine + 2 * c;
  for (int64_t j = 0; j < c; ++j) ur[j] = (xr[j] - mean[j]) * scale[j] + beta[j];
}

// y = act(affine(x)), a block of rows at a time.
template <typename S, typename T = typename Num<S>::C>
void apply_affine(Activation act, int64_t rows, int64_t c, const S* x, const T* affine, S* y) {
  const bool fused = act != Activation::identity;
  const int64_t block = rows_per_block(c);
  parallel_for(rows, std::max<int64_t>(1, 32768 / c), [&](int64_t b, int64_t e) {
    std::vector<T> u(fused ? static_cast<size_t>(block * c) : 0);
    RowReader<S> read(c, block);
    RowWriter<S> write(y, c, block);
    for (int64_t r = b; r < e; r += block) {
      const int64_t n = std::min(block, e - r);
      const T* xs = read(x, r, n);
      T* ys = write.row(r);
      T* us = fused ? u.data() : ys;
      for (int64_t i = 0; i < n; ++i) affine_row(c, xs + i * c, affine, us + i * c);
      if (fused) activation_forward_serial(act, n * c, us, ys);
      write.commit(r, n);
    }
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
  channel_sums(ctx, rows, c, 1, mean, [&](int64_t b, int64_t e, double* __restrict acc) {
    for_each_row(x, c, b, e, [&](const T* __restrict xr) {
      for (int64_t j = 0; j < c; ++j) acc[j] += static_cast<double>(xr[j]);
    });
  });
  for (int64_t j = 0; j < c; ++j) mean[j] /= static_cast<double>(rows);
  channel_sums(ctx, rows, c, 1, var, [&](int64_t b, int64_t e, double* __restrict acc) {
    for_each_row(x, c, b, e, [&](const T* __restrict xr) {
      for (int64_t j = 0; j < c; ++j) {
        double d = static_cast<double>(xr[j]) - mean[j];
        acc[j] += d * d;
      }
    });
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

// With u = bn(x), du = act'(u) * dy, xhat = (x - mean) * invstd, M = rows:
//   dbeta = sum du, dgamma = sum du * xhat,
//   dx = gamma * invstd / M * (M * du - dbeta - xhat * dgamma).
// du is recomputed per row in both passes, never stored.
template <typename S, typename T = typename Num<S>::C>
void backward(const Context& ctx, Activation act, int64_t rows, int64_t c, const S* x, const S* dy,
              const T* gamma, const T* beta, const T* save_mean, const T* save_invstd, S* dx,
              T* dgamma, T* dbeta) {
  const bool fused = act != Activation::identity;
  memory::DataPtr affine_buf = ctx.workspace(static_cast<size_t>(3 * c) * sizeof(T));
  T* affine = static_cast<T*>(affine_buf.get());
  make_affine(c, save_mean, save_invstd, gamma, beta, affine);
  const int64_t block = rows_per_block(c);
  // The gradient reaching bn's output for n rows (x's rows xs, dy's rows dys, both in T): dy
  // itself, or act'(u) * dy into `du` (u and du hold a block of rows each).
  auto grad_rows = [&](int64_t n, const T* xs, const T* dys, T* u, T* du) -> const T* {
    if (!fused) return dys;
    for (int64_t i = 0; i < n; ++i) affine_row(c, xs + i * c, affine, u + i * c);
    activation_backward_serial(act, n * c, u, dys, du);
    return du;
  };
  memory::DataPtr sums_buf = ctx.workspace(static_cast<size_t>(2 * c) * sizeof(double));
  double* sums = static_cast<double*>(sums_buf.get());  // [2, C]: sum du, sum du * (x - mean)
  {
    // channel_sums walks rows in chunks on threads; each chunk has its own block buffers.
    channel_sums(ctx, rows, c, 2, sums, [&](int64_t b, int64_t e, double* __restrict acc) {
      std::vector<T> buf(fused ? static_cast<size_t>(2 * block * c) : 0);
      RowReader<S> read_x(c, block), read_dy(c, block);
      for (int64_t r = b; r < e; r += block) {
        const int64_t n = std::min(block, e - r);
        const T* xs = read_x(x, r, n);
        const T* gs = grad_rows(n, xs, read_dy(dy, r, n), buf.data(), buf.data() + block * c);
        for (int64_t i = 0; i < n; ++i) {
          const T* __restrict xr = xs + i * c;
          const T* __restrict gr = gs + i * c;
          for (int64_t j = 0; j < c; ++j) {
            double g = static_cast<double>(gr[j]);
            acc[j] += g;
            acc[c + j] += g * (static_cast<double>(xr[j]) - static_cast<double>(save_mean[j]));
          }
        }
      }
    });
  }
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
  T* ca = static_cast<T*>(coef_buf.get());
  T* cb = ca + c;
  T* cd = cb + c;
  T* cm = cd + c;
  double m = static_cast<double>(rows);
  for (int64_t j = 0; j < c; ++j) {
    double invstd = static_cast<double>(save_invstd[j]);
    double mean = static_cast<double>(save_mean[j]);
    double g = gamma != nullptr ? static_cast<double>(gamma[j]) : 1.0;
    double a = g * invstd;
    double b = -a * sums[c + j] * invstd * invstd / m;  // coefficient of (x - mean)
    ca[j] = static_cast<T>(a);
    cb[j] = static_cast<T>(b);
    cd[j] = static_cast<T>(-a * sums[j] / m);
    cm[j] = static_cast<T>(mean);
  }
  parallel_for(rows, std::max<int64_t>(1, 32768 / c), [&](int64_t b, int64_t e) {
    std::vector<T> buf(fused ? static_cast<size_t>(2 * block * c) : 0);
    RowReader<S> read_x(c, block), read_dy(c, block);
    RowWriter<S> write(dx, c, block);
    for (int64_t r = b; r < e; r += block) {
      // dx may be dy itself (kernels/batch_norm.h): gs and dxs may alias, element for element
      // (when S is 16-bit, gs is a widened copy and dxs a buffer narrowed after the block).
      const int64_t n = std::min(block, e - r);
      const T* xs = read_x(x, r, n);
      const T* gs = grad_rows(n, xs, read_dy(dy, r, n), buf.data(), buf.data() + block * c);
      T* dxs = write.row(r);
      for (int64_t i = 0; i < n * c; i += c) {
        const T* __restrict xr = xs + i;
        const T* gr = gs + i;
        T* dxr = dxs + i;
        for (int64_t j = 0; j < c; ++j) dxr[j] = ca[j] * gr[j] + cb[j] * (xr[j] - cm[j]) + cd[j];
      }
      write.commit(r, n);
    }
  });
}

}  // namespace

void batch_norm_act_forward_train(const Context& ctx, DType dtype, Activation act, int64_t rows,
                                  int64_t c, const void* x, const void* gamma, const void* beta,
                                  double eps, double momentum, void* y, void* save_mean,
                                  void* save_invstd, void* running_mean, void* running_var) {
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
}

void batch_norm_forward_train(const Context& ctx, DType dtype, int64_t rows, int64_t c,
                              const void* x, const void* gamma, const void* beta, double eps,
                              double momentum, void* y, void* save_mean, void* save_invstd,
                              void* running_mean, void* running_var) {
  cpu::batch_norm_act_forward_train(ctx, dtype, Activation::identity, rows, c, x, gamma, beta, eps,
                                    momentum, y, save_mean, save_invstd, running_mean, running_var);
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
