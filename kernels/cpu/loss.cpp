// CPU softmax cross-entropy with label smoothing, one row of logits [N, C] at a time.
// Rows are stabilised by their maximum and accumulated in double.
#include "kernels/loss.h"

#include <cmath>

#include "kernels/cpu/cpu_common.h"

namespace frugal::kernels::cpu {
namespace {

// Labels are checked on the calling thread: an exception must not leave an OpenMP region.
void check_labels(const char* op, int64_t n, int64_t c, const int64_t* labels) {
  for (int64_t i = 0; i < n; ++i) {
    FRUGAL_CHECK(labels[i] >= 0 && labels[i] < c, op, ": label ", labels[i], " of row ", i,
                 " is outside [0, ", c, ") for ", c, " classes");
  }
}

void check_args(const char* op, int64_t n, int64_t c, double smoothing) {
  FRUGAL_CHECK(n >= 0 && c >= 0, op, ": bad logits size [", n, ", ", c, "]");
  FRUGAL_CHECK(n == 0 || c > 0, op, ": logits [", n, ", 0] have no classes");
  FRUGAL_CHECK(smoothing >= 0 && smoothing <= 1, op, ": label smoothing ", smoothing,
               " is outside [0, 1]");
}

// Rows a thread takes at a time: about 4096 logits' worth (any number of rows when there are no
// classes, as [0, 0] logits have).
int64_t rows_per_chunk(int64_t c) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(c, 1)); }

template <typename T>
void forward_impl(int64_t n, int64_t c, const T* logits, const int64_t* labels, double s, T* loss,
                  T* lse) {
  parallel_for(n, rows_per_chunk(c), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = logits + i * c;
      double mx = static_cast<double>(row[0]);
      for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
      double sum_exp = 0, sum_x = 0;
      for (int64_t j = 0; j < c; ++j) {
        double v = static_cast<double>(row[j]);
        sum_exp += std::exp(v - mx);
        sum_x += v;
      }
      double l = mx + std::log(sum_exp);
      // -log p_j = l - x_j; the smoothed term is the mean of that over the classes.
      double nll = l - static_cast<double>(row[labels[i]]);
      double smooth = l - sum_x / static_cast<double>(c);
      // Each term only where it counts: a -inf logit makes `smooth` +inf, and 0 * inf is NaN
      // (PyTorch's loss without smoothing stays finite).
      double value = s == 0.0 ? nll : s == 1.0 ? smooth : (1.0 - s) * nll + s * smooth;
      loss[i] = static_cast<T>(value);
      lse[i] = static_cast<T>(l);
    }
  });
}

template <typename T>
void backward_impl(int64_t n, int64_t c, const T* logits, const int64_t* labels, double s,
                   const T* lse, const T* dloss, T* dlogits) {
  const double off = s / static_cast<double>(c);
  parallel_for(n, rows_per_chunk(c), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = logits + i * c;
      T* out = dlogits + i * c;
      const double l = static_cast<double>(lse[i]), g = static_cast<double>(dloss[i]);
      for (int64_t j = 0; j < c; ++j) {
        double p = std::exp(static_cast<double>(row[j]) - l);
        out[j] = static_cast<T>(g * (p - off));
      }
      out[labels[i]] =
          static_cast<T>(g * (std::exp(static_cast<double>(row[labels[i]]) - l) - off - (1.0 - s)));
    }
  });
}

}  // namespace

void cross_entropy_forward(const Context& ctx, DType dtype, int64_t n, int64_t c,
                           const void* logits, const int64_t* labels, double smoothing, void* loss,
                           void* lse) {
  (void)ctx;
  check_args("cross_entropy_forward", n, c, smoothing);
  check_labels("cross_entropy_forward", n, c, labels);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "cross_entropy_forward",
                          forward_impl<T>(n, c, static_cast<const T*>(logits), labels, smoothing,
                                          static_cast<T*>(loss), static_cast<T*>(lse)));
}

void cross_entropy_backward(const Context& ctx, DType dtype, int64_t n, int64_t c,
                            const void* logits, const int64_t* labels, double smoothing,
                            const void* lse, const void* dloss, void* dlogits) {
  (void)ctx;
  check_args("cross_entropy_backward", n, c, smoothing);
  check_labels("cross_entropy_backward", n, c, labels);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "cross_entropy_backward",
                          backward_impl<T>(n, c, static_cast<const T*>(logits), labels, smoothing,
                                           static_cast<const T*>(lse), static_cast<const T*>(dloss),
                                           static_cast<T*>(dlogits)));
}

}  // namespace frugal::kernels::cpu
