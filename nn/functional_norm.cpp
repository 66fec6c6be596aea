// batch_norm: forward (training with batch statistics, eval with running ones) and backward.
// Statistics, weight, bias and running buffers are acc_dtype(x) whatever x's dtype.
#include <cmath>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/batch_norm.h"
#include "nn/functional.h"

namespace frugal::nn::functional {
namespace {

using detail::cast_raw;

void check_param(const Tensor& p, const char* what, int64_t c, DType acc, const Tensor& x) {
  if (!p.defined()) return;
  FRUGAL_CHECK(p.shape() == Shape{c} && p.dtype() == acc && p.device() == x.device(),
               "batch_norm: ", what, " ", describe(p), " does not match input ", describe(x),
               " (expected [", c, "] ", acc, " ", x.device(), ")");
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& w_in, const Tensor& b_in,
                  const Tensor& running_mean, const Tensor& running_var, BatchNormOptions opt) {
  detail::check_defined("batch_norm", {&x, &w_in, &b_in});
  // Autocast's f32 policy reaches the parameters only: x keeps its (low-precision) dtype.
  const Tensor weight = autocast::apply(AutocastOp::batch_norm, w_in);
  const Tensor bias = autocast::apply(AutocastOp::batch_norm, b_in);
  FRUGAL_CHECK(x.ndim() >= 2, "batch_norm: expected [N, H, W, C] or [N, C], got ", describe(x));
  detail::check_floating("batch_norm", x);
  const int64_t c = x.size(-1), rows = x.numel() / std::max<int64_t>(c, 1);
  const DType acc = acc_dtype(x.dtype());
  check_param(weight, "weight", c, acc, x);
  check_param(bias, "bias", c, acc, x);
  check_param(running_mean, "running_mean", c, acc, x);
  check_param(running_var, "running_var", c, acc, x);
  FRUGAL_CHECK(opt.training || (running_mean.defined() && running_var.defined()),
               "batch_norm: evaluation mode needs running statistics");
  FRUGAL_CHECK(!opt.training || rows > 1, "batch_norm: expected more than 1 value per channel ",
               "when training, got input ", describe(x));

  // Note [CPU dtypes]: 16-bit CPU inputs run in f32; params are f32 already.
  const DType dt = detail::cpu_half(x) ? DType::f32 : x.dtype();
  Tensor xc = cast_raw(x, dt);
  Tensor y = Tensor::empty(x.shape(), {dt, x.device()});
  Tensor mean, invstd;
  const bool meta = x.device().is_meta();
  kernels::Context ctx = detail::ctx_of(x);
  if (opt.training) {
    mean = Tensor::empty(Shape{c}, {acc, x.device()});
    invstd = Tensor::empty(Shape{c}, {acc, x.device()});
    if (running_mean.defined()) running_mean.bump_version();
    if (running_var.defined()) running_var.bump_version();
    if (!meta) {
      kernels::batch_norm_forward_train(
          ctx, dt, rows, c, xc.data_ptr(), weight.data_ptr(), bias.data_ptr(), opt.eps,
          opt.momentum, y.data_ptr(), mean.data_ptr(), invstd.data_ptr(),
          running_mean.defined() ? running_mean.data_ptr() : nullptr,
          running_var.defined() ? running_var.data_ptr() : nullptr);
    }
  } else {
    if (!meta) {
      kernels::batch_norm_forward_eval(ctx, dt, rows, c, xc.data_ptr(), weight.data_ptr(),
                                       bias.data_ptr(), running_mean.data_ptr(),
                                       running_var.data_ptr(), opt.eps, y.data_ptr());
    }
    if (autograd::any_requires_grad({x, weight, bias}) && meta) {
      mean = Tensor::empty(Shape{c}, {acc, x.device()});
      invstd = Tensor::empty(Shape{c}, {acc, x.device()});
    } else if (autograd::any_requires_grad({x, weight, bias})) {
      // In evaluation the statistics are constants: the backward below is the training one
      // with mean/invstd from the running buffers and no batch-statistic terms.
      autograd::NoGradGuard ng;
      mean = running_mean.detach().clone();
      std::vector<double> var = running_var.to_vector();
      std::vector<double> inv(var.size());
      for (size_t i = 0; i < var.size(); ++i) inv[i] = 1.0 / std::sqrt(var[i] + opt.eps);
      invstd = from_vector(inv, Shape{c}, {acc, x.device()});
    }
  }
  y = cast_raw(y, x.dtype());
  const bool need_x = x.requires_grad();
  return autograd::record(
      "batch_norm", {x, weight, bias}, y,
      [rows, c, need_x, training = opt.training, x_saved = autograd::save(x),
       w_saved = autograd::save(weight), mean, invstd](const std::vector<Tensor>& g) {
        const DType dt = detail::cpu_half(g[0]) ? DType::f32 : g[0].dtype();
        const DType acc = acc_dtype(dt);
        Tensor gc = cast_raw(g[0], dt), xc = cast_raw(x_saved, dt);
        Tensor dx = need_x ? Tensor::empty(x_saved.shape(), {dt, g[0].device()}) : Tensor();
        Tensor dgamma = Tensor::empty(Shape{c}, {acc, g[0].device()});
        Tensor dbeta = Tensor::empty(Shape{c}, {acc, g[0].device()});
        if (!g[0].device().is_meta()) {
          kernels::Context ctx = detail::ctx_of(g[0]);
          kernels::batch_norm_backward(ctx, dt, rows, c, xc.data_ptr(), gc.data_ptr(),
                                       w_saved.data_ptr(), mean.data_ptr(), invstd.data_ptr(),
                                       training && need_x ? dx.data_ptr() : nullptr,
                                       dgamma.data_ptr(), dbeta.data_ptr());
          if (!training && need_x) {  // dx = dy * gamma * invstd (statistics are constants)
            dx = mul(gc, mul(w_saved, invstd));
          }
        }
        if (dx.defined()) dx = cast_raw(dx, x_saved.dtype());
        return std::vector<Tensor>{dx, dgamma, dbeta};
      });
}

}  // namespace frugal::nn::functional
