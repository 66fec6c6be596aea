// sync_batch_norm: batch statistics across data-parallel replicas, from differentiable ops.
#include <numeric>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"

namespace frugal::nn::functional {

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
  std::vector<int64_t> rows_dims(static_cast<size_t>(x.ndim() - 1));
  std::iota(rows_dims.begin(), rows_dims.end(), 0);
  const double local_rows = static_cast<double>(x.numel() / c);

  // Statistics in f32 whatever x's dtype (as the fused kernels keep them).
  const DType acc = acc_dtype(x.dtype());
  Tensor xf = x.dtype() == acc ? x : cast(x, acc);
  Tensor packed = cat({sum(xf, rows_dims), sum(mul(xf, xf), rows_dims),
                       full({1}, local_rows, {.dtype = acc, .device = x.device()})},
                      0);  // [2C + 1]: one collective for all three
  Tensor total = sum_across(packed);
  Tensor n = narrow(total, 0, 2 * c, 1);
  Tensor mean = div(narrow(total, 0, 0, c), n);
  // E[x^2] - mean^2, biased; clamped at 0 against rounding below it.
  Tensor var = clamp(sub(div(narrow(total, 0, c, c), n), mul(mean, mean)), 0.0);
  Tensor invstd = rsqrt(add(var, eps));
  Tensor y = add(mul(mul(sub(xf, mean), invstd), weight), bias);
  if (!autograd::recomputing() && running_mean.defined() && running_var.defined()) {
    autograd::NoGradGuard no_grad;
    // The running variance is unbiased over every replica's rows: var * n / (n - 1).
    Tensor unbiased = mul(var.detach(), div(n.detach(), sub(n.detach(), 1.0)));
    copy_(running_mean, add(mul(running_mean, 1.0 - momentum), mul(mean.detach(), momentum)));
    copy_(running_var, add(mul(running_var, 1.0 - momentum), mul(unbiased, momentum)));
    running_mean.bump_version();
    running_var.bump_version();
  }
  return y.dtype() == x.dtype() ? y : cast(y, x.dtype());
}

}  // namespace frugal::nn::functional
