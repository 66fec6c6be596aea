// sync_batch_norm: batch statistics across data-parallel replicas. One recorded op that saves
// what the fused batch norm saves (x and per-channel statistics), with two cross-replica sums:
// the statistics in forward, their gradients' sums in backward.
#include <numeric>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"

namespace frugal::nn::functional {
namespace {

std::vector<int64_t> all_but_last(const Tensor& x) {
  std::vector<int64_t> dims(static_cast<size_t>(x.ndim() - 1));
  std::iota(dims.begin(), dims.end(), 0);
  return dims;
}

// The replicas' sum of `t` as plain numbers: no graph of its own (sync_batch_norm's backward is
// written out below).
Tensor summed(const CrossReplicaSum& sum_across, const Tensor& t) {
  autograd::NoGradGuard no_grad;
  return sum_across(t);
}

}  // namespace

Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var,
                       const CrossReplicaSum& sum_across, double momentum, double eps) {
  FRUGAL_CHECK(x.defined() && weight.defined() && bias.defined(),
               "sync_batch_norm: x, weight and bias must be defined");
  FRUGAL_CHECK(sum_across != nullptr, "sync_batch_norm: no cross-replica sum given");
  FRUGAL_CHECK(x.ndim() >= 2, "sync_batch_norm: expected [N, H, W, C] or [N, C], got ", x.shape());
  const int64_t c = x.size(-1);
  FRUGAL_CHECK(weight.numel() == c && bias.numel() == c, "sync_batch_norm: weight and bias must ",
               "have ", c, " elements for input ", x.shape());
  const std::vector<int64_t> rows = all_but_last(x);
  const DType acc = acc_dtype(x.dtype());  // statistics in f32 whatever x's dtype
  Tensor mean, invstd, n, y;
  {
    autograd::NoGradGuard no_grad;
    Tensor xf = x.dtype() == acc ? x.detach() : cast(x.detach(), acc);
    // Sums, sums of squares and this replica's rows: one collective for all three.
    Tensor total =
        summed(sum_across, cat({sum(xf, rows), sum(mul(xf, xf), rows),
                                full({1}, static_cast<double>(x.numel() / c), {acc, x.device()})},
                               0));
    n = narrow(total, 0, 2 * c, 1);
    mean = div(narrow(total, 0, 0, c), n);
    // E[x^2] - mean^2, biased; clamped at 0 against rounding below it.
    Tensor var = clamp(sub(div(narrow(total, 0, c, c), n), mul(mean, mean)), 0.0);
    invstd = rsqrt(add(var, eps));
    y = add(mul(mul(sub(xf, mean), invstd), weight.detach()), bias.detach());
    if (y.dtype() != x.dtype()) y = cast(y, x.dtype());
    if (!autograd::recomputing() && running_mean.defined() && running_var.defined()) {
      // The running variance is unbiased over every replica's rows: var * n / (n - 1). One row
      // in all (one replica, one value a channel) has no unbiased variance; n / 1 keeps the
      // running variance finite where n / 0 made it NaN for good (the count is on the device:
      // refusing it, as batch_norm does, would wait for the collective).
      Tensor unbiased = mul(var, div(n, clamp(sub(n, 1.0), 1.0)));
      copy_(running_mean, add(mul(running_mean, 1.0 - momentum), mul(mean, momentum)));
      copy_(running_var, add(mul(running_var, 1.0 - momentum), mul(unbiased, momentum)));
      running_mean.bump_version();
      running_var.bump_version();
    }
  }
  return autograd::record(
      "sync_batch_norm", {x, weight, bias}, y, {x, weight, mean, invstd, n},
      [sum_across, rows](const std::vector<Tensor>& g, std::vector<Tensor>& saved) {
        const Tensor &xs = saved[0], &w = saved[1], &mu = saved[2], &is = saved[3],
                     &count = saved[4];
        const DType acc = acc_dtype(xs.dtype());
        const int64_t c = xs.size(-1);
        Tensor dy = g[0].dtype() == acc ? g[0] : cast(g[0], acc);
        Tensor xhat = mul(sub(xs.dtype() == acc ? xs : cast(xs, acc), mu), is);
        Tensor dbeta = sum(dy, rows), dgamma = sum(mul(dy, xhat), rows);  // this replica's
        // dx needs the means of dy and dy * xhat over every replica's rows.
        Tensor total = summed(sum_across, cat({dbeta, dgamma}, 0));
        Tensor mean_dy = div(narrow(total, 0, 0, c), count);
        Tensor mean_dy_xhat = div(narrow(total, 0, c, c), count);
        Tensor dx = mul(sub(sub(dy, mean_dy), mul(xhat, mean_dy_xhat)), mul(is, w));
        if (dx.dtype() != xs.dtype()) dx = cast(dx, xs.dtype());
        return std::vector<Tensor>{dx, dgamma, dbeta};
      });
}

}  // namespace frugal::nn::functional
