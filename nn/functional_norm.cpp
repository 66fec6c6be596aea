// batch_norm: forward (training with batch statistics, eval with running ones) and backward.
// Statistics, weight, bias and running buffers are acc_dtype(x) whatever x's dtype.
#include <cmath>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/batch_norm.h"
#include "kernels/conv_workspace.h"
#include "nn/batch_norm_deferred.h"
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

using detail::data_or_null;

const char* recipe_name(Activation act) {
  switch (act) {
    case Activation::relu:
      return "batch_norm+relu";
    case Activation::relu6:
      return "batch_norm+relu6";
    case Activation::hardswish:
      return "batch_norm+hardswish";
    case Activation::silu:
      return "batch_norm+silu";
    case Activation::sigmoid:
      return "batch_norm+sigmoid";
    case Activation::identity:
      return "batch_norm";
  }
  return "batch_norm+?";
}

}  // namespace

std::optional<Activation> batch_norm_recipe_activation(const std::string& name) {
  for (Activation act : {Activation::relu, Activation::relu6, Activation::hardswish,
                         Activation::silu, Activation::sigmoid, Activation::identity}) {
    if (name == recipe_name(act)) return act;
  }
  return std::nullopt;
}

namespace {

// act(bn(x)) from saved statistics: the recompute of a training forward's output, bit for bit
// (Note [Batch norm with its activation]). Without an activation the write is deferred, as the
// forward's is, so that a recomputed residual sum reads x instead (Note [Residual sums of
// deferred batch norms] in nn/batch_norm_deferred.h).
Tensor apply_saved_statistics(Activation act, const Tensor& x, const Tensor& weight,
                              const Tensor& bias, const Tensor& mean, const Tensor& invstd) {
  Tensor y = Tensor::empty(x.shape(), x.options());
  const int64_t c = x.size(-1), rows = x.numel() / std::max<int64_t>(c, 1);
  if (act == Activation::identity && !x.device().is_meta()) {
    y.defer_write(std::make_shared<DeferredBatchNormAct>(act, x, weight, bias, mean, invstd));
  } else {  // meta defers nothing and the kernel computes nothing there
    kernels::batch_norm_act_apply(detail::ctx_of(x), x.dtype(), act, rows, c, x.data_ptr(),
                                  data_or_null(weight), data_or_null(bias), mean.data_ptr(),
                                  invstd.data_ptr(), y.data_ptr());
  }
  return y;
}

// Evaluation: running statistics, which are constants for backward; the activation, if any,
// runs as its own op (evaluation with gradients is rare and not worth a fused path).
Tensor eval_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var,
                       const BatchNormOptions& opt, int64_t c) {
  const DType acc = acc_dtype(x.dtype());
  const int64_t rows = x.numel() / std::max<int64_t>(c, 1);
  Tensor y = Tensor::empty(x.shape(), x.options());
  kernels::batch_norm_forward_eval(
      detail::ctx_of(x), x.dtype(), rows, c, x.data_ptr(), data_or_null(weight), data_or_null(bias),
      running_mean.data_ptr(), running_var.data_ptr(), opt.eps, y.data_ptr());
  Tensor mean, invstd;  // [C] copies of the running statistics, only when backward needs them
  if (autograd::any_requires_grad({x, weight, bias})) {
    mean = running_mean.detach().clone();
    if (x.device().is_meta()) {
      invstd = Tensor::empty(Shape{c}, {acc, x.device()});
    } else {
      autograd::NoGradGuard ng;
      std::vector<double> var = running_var.to_vector();
      std::vector<double> inv(var.size());
      for (size_t i = 0; i < var.size(); ++i) inv[i] = 1.0 / std::sqrt(var[i] + opt.eps);
      invstd = from_vector(inv, Shape{c}, {acc, x.device()});
    }
  }
  y = autograd::record(
      "batch_norm", {x, weight, bias}, y, {x, weight, mean, invstd},
      [rows, c, need_x = x.requires_grad()](const std::vector<Tensor>& g,
                                            const std::vector<Tensor>& saved) {
        const Tensor &x_saved = saved[0], &w = saved[1], &mean = saved[2], &is = saved[3];
        const DType dt = detail::cpu_half(g[0]) ? DType::f32 : g[0].dtype();
        const DType acc = acc_dtype(dt);
        Tensor gc = cast_raw(g[0], dt), xc = cast_raw(x_saved, dt);
        Tensor dgamma = Tensor::empty(Shape{c}, {acc, g[0].device()});
        Tensor dbeta = Tensor::empty(Shape{c}, {acc, g[0].device()});
        Tensor dx;
        if (!g[0].device().is_meta()) {
          // The training kernel's dgamma and dbeta hold with the running statistics; dx has no
          // batch-statistic terms: dx = dy * gamma * invstd.
          kernels::batch_norm_backward(detail::ctx_of(g[0]), dt, rows, c, xc.data_ptr(),
                                       gc.data_ptr(), data_or_null(w), mean.data_ptr(),
                                       is.data_ptr(), nullptr, dgamma.data_ptr(), dbeta.data_ptr());
          if (need_x) dx = mul(gc, w.defined() ? mul(w, is) : is);
        } else if (need_x) {
          dx = Tensor::empty(x_saved.shape(), {dt, g[0].device()});
        }
        if (dx.defined()) dx = cast_raw(dx, x_saved.dtype());
        return std::vector<Tensor>{dx, dgamma, dbeta};
      });
  return opt.activation == Activation::identity ? y : activation(opt.activation, y);
}

// The batch norm itself: parameters and running statistics in acc_dtype(x).
Tensor batch_norm_acc(const Tensor& x, const Tensor& w_in, const Tensor& b_in,
                      const Tensor& running_mean, const Tensor& running_var, BatchNormOptions opt,
                      const Tensor& num_batches_tracked) {
  // weight and bias may be undefined (torch's affine=False: gamma 1, beta 0).
  detail::check_defined("batch_norm", {&x});
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
  const Tensor& nbt = num_batches_tracked;
  FRUGAL_CHECK(!nbt.defined() ||
                   (nbt.dtype() == DType::i64 && nbt.numel() == 1 && nbt.device() == x.device()),
               "batch_norm: num_batches_tracked ", describe(nbt),
               " is not an i64 scalar on the input's device ", x.device());
  FRUGAL_CHECK(opt.training || (running_mean.defined() && running_var.defined()),
               "batch_norm: evaluation mode needs running statistics");
  if (opt.training && rows <= 1) {
    throw BatchTooSmallError(detail::str("batch_norm: expected more than 1 value per channel ",
                                         "when training, got input ", describe(x)));
  }

  if (!opt.training) return eval_batch_norm(x, weight, bias, running_mean, running_var, opt, c);

  // 16-bit inputs are computed in f32 inside the kernels (Note [CPU dtypes]); params are f32.
  Tensor y = Tensor::empty(x.shape(), x.options());
  Tensor mean = Tensor::empty(Shape{c}, {acc, x.device()});    // [C]
  Tensor invstd = Tensor::empty(Shape{c}, {acc, x.device()});  // [C]
  // A checkpointed segment run again in backward counts its statistics once (Note
  // [Checkpointing]).
  const bool update_running = !autograd::recomputing();
  Tensor rm = update_running ? running_mean : Tensor(),
         rv = update_running ? running_var : Tensor();
  if (rm.defined()) rm.bump_version();
  if (rv.defined()) rv.bump_version();
  const Tensor counter = update_running ? num_batches_tracked : Tensor();
  if (counter.defined()) counter.bump_version();
  const Activation act = opt.activation;
  // Note [Deferred writes] (core/tensor.h): y is written on its first read, or never when a
  // depthwise conv normalizes x as it loads it (Note [Batch norm inside the depthwise
  // convolution] in kernels/conv.h). Only where backward keeps x's bytes anyway (gradients on, x
  // no recipe of its own: the write holds x until it runs, and the meta device, which defers
  // nothing, must see x freed when it is) and for an activation such a conv takes, or none: a
  // residual add sums it unwritten (Note [Residual sums of deferred batch norms] in
  // nn/batch_norm_deferred.h). The CPU defers too, so its tests run the deferred paths; only
  // CUDA's convs fuse.
  const bool defer =
      !x.device().is_meta() && autograd::any_requires_grad({x, weight, bias}) &&
      autograd::grad_enabled() && !autograd::has_recipe(x) &&
      (act == Activation::identity || kernels::cuda::depthwise_fuses_activation(act));
  kernels::batch_norm_act_forward_train(
      detail::ctx_of(x), x.dtype(), act, rows, c, x.data_ptr(), data_or_null(weight),
      data_or_null(bias), opt.eps, opt.momentum, defer ? nullptr : y.data_ptr(), mean.data_ptr(),
      invstd.data_ptr(), rm.defined() ? rm.data_ptr() : nullptr,
      rv.defined() ? rv.data_ptr() : nullptr,
      counter.defined() ? counter.data<int64_t>() : nullptr);
  if (defer) {
    auto detached = [](const Tensor& t) { return t.defined() ? t.detach() : t; };
    y.defer_write(std::make_shared<DeferredBatchNormAct>(act, x.detach(), detached(weight),
                                                         detached(bias), mean, invstd));
  }
  autograd::set_recipe(y, recipe_name(act), {x, weight, bias, mean, invstd},
                       [act](const std::vector<Tensor>& in) {
                         return apply_saved_statistics(act, in[0], in[1], in[2], in[3], in[4]);
                       });
  const bool need_x = x.requires_grad();
  return autograd::record(
      "batch_norm", {x, weight, bias}, y, {x, weight, bias, mean, invstd},
      [rows, c, need_x, act, y_storage = std::weak_ptr<Storage>(y.impl().storage)](
          const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
        // A y still unwritten and still held (a hook kept it) is written now, while its inputs
        // are as they were: after backward the optimizer changes gamma and beta.
        if (auto st = y_storage.lock(); st != nullptr && st->deferred != nullptr) {
          st->run_deferred();
        }
        const Tensor &x_saved = saved[0], &w = saved[1], &b = saved[2];
        const DType dt = g[0].dtype();
        const DType acc = acc_dtype(dt);
        // dx is written over the incoming gradient when nothing else holds it (each element is
        // read before it is written, in both kernel families): one activation-sized buffer
        // less at the widest layers. Asked before gc below takes a second handle to it.
        const bool reuse = need_x && g[0].dtype() == dt && autograd::sole_owner(g[0]);
        Tensor gc = cast_raw(g[0], dt), xc = cast_raw(x_saved, dt);
        Tensor dx = reuse    ? gc
                    : need_x ? Tensor::empty(x_saved.shape(), {dt, g[0].device()})
                             : Tensor();
        Tensor dgamma = Tensor::empty(Shape{c}, {acc, g[0].device()});
        Tensor dbeta = Tensor::empty(Shape{c}, {acc, g[0].device()});
        kernels::batch_norm_act_backward(
            detail::ctx_of(g[0]), dt, act, rows, c, xc.data_ptr(), gc.data_ptr(), data_or_null(w),
            data_or_null(b), saved[3].data_ptr(), saved[4].data_ptr(),
            dx.defined() ? dx.data_ptr() : nullptr, dgamma.data_ptr(), dbeta.data_ptr());
        if (dx.defined()) dx = cast_raw(dx, x_saved.dtype());
        return std::vector<Tensor>{dx, dgamma, dbeta};
      });
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, BatchNormOptions opt,
                  const Tensor& num_batches_tracked) {
  memory::OpScope op_scope("batch_norm");  // Note [Allocation events]
  // A model cast whole to x's 16-bit dtype (Module::to(DType::f16), torch's model.half()) holds
  // its parameters and running statistics in that dtype, which PyTorch's batch_norm takes. They
  // are widened to f32 here: the parameters through a cast their gradients flow back through,
  // the statistics as copies written back, rounded, after the update.
  auto in_x_dtype = [&](const Tensor& t) {
    return t.defined() && is_low_precision(x.dtype()) && t.dtype() == x.dtype();
  };
  if (!x.defined() || !(in_x_dtype(weight) || in_x_dtype(bias) || in_x_dtype(running_mean) ||
                        in_x_dtype(running_var))) {
    return batch_norm_acc(x, weight, bias, running_mean, running_var, opt, num_batches_tracked);
  }
  auto widened = [&](const Tensor& t) { return in_x_dtype(t) ? cast(t, DType::f32) : t; };
  Tensor rm = running_mean.defined() ? widened(running_mean.detach()) : running_mean;
  Tensor rv = running_var.defined() ? widened(running_var.detach()) : running_var;
  Tensor y = batch_norm_acc(x, widened(weight), widened(bias), rm, rv, opt, num_batches_tracked);
  autograd::NoGradGuard no_grad;
  for (auto [kept, used] : {std::pair{running_mean, rm}, std::pair{running_var, rv}}) {
    if (kept.defined() && !used.same(kept) && opt.training) {
      copy_(kept, used);
      kept.bump_version();
    }
  }
  return y;
}

}  // namespace frugal::nn::functional
