// conv2d and linear: forward and backward side by side.
#include <memory>
#include <optional>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/conv.h"
#include "kernels/conv_workspace.h"
#include "nn/batch_norm_deferred.h"
#include "nn/functional.h"

namespace frugal::nn::functional {
namespace {

using detail::cast_raw;

kernels::Conv2dShape conv_shape(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  FRUGAL_CHECK(x.ndim() == 4 && w.ndim() == 4, "conv2d: expected x [N, H, W, C] and weight ",
               "[K, kh, kw, C/groups], got x ", describe(x), " and weight ", describe(w));
  FRUGAL_CHECK(o.stride > 0 && o.dilation > 0 && o.padding >= 0 && o.groups > 0,
               "conv2d: bad options stride=", o.stride, " padding=", o.padding,
               " dilation=", o.dilation, " groups=", o.groups);
  kernels::Conv2dShape s;
  s.n = x.size(0), s.h = x.size(1), s.w = x.size(2), s.c = x.size(3);
  s.k = w.size(0), s.kh = w.size(1), s.kw = w.size(2);
  s.stride_h = s.stride_w = o.stride;
  s.pad_h = s.pad_w = o.padding;
  s.dil_h = s.dil_w = o.dilation;
  s.groups = o.groups;
  FRUGAL_CHECK(s.c % s.groups == 0 && s.k % s.groups == 0 && w.size(3) * s.groups == s.c,
               "conv2d: input ", describe(x), " with groups=", o.groups, " does not match weight ",
               describe(w), " (weight must be [K, kh, kw, C/groups])");
  FRUGAL_CHECK(s.oh() > 0 && s.ow() > 0, "conv2d: input ", describe(x), " is too small for ",
               s.str());
  return s;
}

Tensor conv_forward_raw(const Tensor& x, const Tensor& w, const Tensor& b,
                        const kernels::Conv2dShape& s) {
  Tensor y = Tensor::empty(Shape{s.n, s.oh(), s.ow(), s.k}, x.options());
  if (x.device().is_meta()) {  // Note [Bounded conv workspace]
    kernels::meta_conv_workspace(detail::ctx_of(x), kernels::ConvPass::forward, x.dtype(), s);
    return y;
  }
  kernels::conv2d_forward(detail::ctx_of(x), x.dtype(), s, x.data_ptr(), w.data_ptr(),
                          b.defined() ? b.data_ptr() : nullptr, y.data_ptr());
  return y;
}

// conv_forward_raw of x = act(bn(z)) from z and the statistics (Note [Batch norm inside the
// depthwise convolution] in kernels/conv.h); x's bytes stay unwritten.
Tensor conv_forward_bn_act_raw(const DeferredBatchNormAct& x, const Tensor& w, const Tensor& b,
                               const kernels::Conv2dShape& s) {
  const Tensor& z = x.z();
  Tensor y = Tensor::empty(Shape{s.n, s.oh(), s.ow(), s.k}, z.options());
  kernels::conv2d_forward_bn_act(detail::ctx_of(z), z.dtype(), s, x.input("conv2d"), z.data_ptr(),
                                 w.data_ptr(), b.defined() ? b.data_ptr() : nullptr, y.data_ptr());
  return y;
}

// Gradients in g's dtype (16-bit CPU tensors are computed in f32 inside the kernels, Note [CPU
// dtypes]); dw and db in f32 instead when `param_dtype` (autocast::grad_dtype of the weight)
// asks for it.
// The weight gradient comes first and the input x (often recomputed, Note [Saved tensors]) is
// released before dx is allocated, so the two activation-sized buffers never coexist.
// `bn` (Note [Batch norm inside the depthwise convolution], kernels/conv.h): x is the z of a
// batch norm's output act(bn(z)), whose gamma, beta, mean and invstd are bn->stats.
struct BnInput {
  Activation act = Activation::identity;
  std::vector<Tensor> stats;  // gamma, beta (either may be undefined), mean, invstd
};

std::vector<Tensor> conv_backward_raw(const Tensor& g, Tensor&& x, const Tensor& w, bool need_x,
                                      bool need_w, bool need_b, const kernels::Conv2dShape& s,
                                      DType param_dtype, const BnInput* bn = nullptr) {
  DType dt = g.dtype();
  DType dw_dt = param_dtype == DType::f32 ? DType::f32 : dt;
  Tensor gc = cast_raw(g, dt), wc = need_x ? cast_raw(w, dt) : w;
  Tensor dx, dw, db;
  kernels::Context ctx = detail::ctx_of(g);
  bool meta = g.device().is_meta();
  if (need_w || need_b) {
    Tensor xc = cast_raw(x, dt);
    dw = Tensor::empty(Shape{s.k, s.kh, s.kw, s.cin_per_group()}, {dw_dt, g.device()});
    if (need_b) db = Tensor::empty(Shape{s.k}, {dw_dt, g.device()});
    if (!meta && bn != nullptr) {
      const kernels::BnActInput in{bn->act, bn->stats[2].data_ptr(), bn->stats[3].data_ptr(),
                                   detail::data_or_null(bn->stats[0]),
                                   detail::data_or_null(bn->stats[1])};
      kernels::conv2d_backward_weight_bn_act(ctx, dt, dw_dt, s, in, xc.data_ptr(), gc.data_ptr(),
                                             dw.data_ptr(), need_b ? db.data_ptr() : nullptr);
    } else if (!meta) {
      kernels::conv2d_backward_weight(ctx, dt, dw_dt, s, xc.data_ptr(), gc.data_ptr(),
                                      dw.data_ptr(), need_b ? db.data_ptr() : nullptr);
    } else {
      kernels::meta_conv_workspace(ctx, kernels::ConvPass::backward_weight, dt, s);
    }
  }
  x = Tensor();
  if (need_x) {
    dx = Tensor::empty(Shape{s.n, s.h, s.w, s.c}, {dt, g.device()});
    if (!meta) {
      kernels::conv2d_backward_input(ctx, dt, s, gc.data_ptr(), wc.data_ptr(), dx.data_ptr());
    } else {
      kernels::meta_conv_workspace(ctx, kernels::ConvPass::backward_input, dt, s);
    }
  }
  return {dx, dw, db};
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, Conv2dOptions opt) {
  memory::OpScope op_scope("conv2d");  // Note [Allocation events]
  detail::check_same_device("conv2d", {&x_in, &w_in});
  const Tensor x = autocast::apply(AutocastOp::conv2d, x_in);
  const Tensor weight = autocast::apply(AutocastOp::conv2d, w_in);
  const Tensor bias = autocast::apply(AutocastOp::conv2d, b_in);
  kernels::Conv2dShape s = conv_shape(x, weight, opt);
  FRUGAL_CHECK(x.dtype() == weight.dtype(), "conv2d: input ", describe(x), " and weight ",
               describe(weight), " have different dtypes");
  if (bias.defined()) {
    detail::check_same_device("conv2d", {&x, &bias});
    FRUGAL_CHECK(bias.shape() == Shape{s.k} && bias.dtype() == x.dtype(), "conv2d: bias ",
                 describe(bias), " does not match ", s.k, " output channels of dtype ", x.dtype());
  }
  // Note [Batch norm inside the depthwise convolution] (kernels/conv.h): x still unwritten, and
  // a kernel that normalizes its loads.
  // (The same layout: a reshape shares the storage and its pending write.)
  const auto* deferred = dynamic_cast<const DeferredBatchNormAct*>(x.deferred_write());
  Tensor y = deferred != nullptr && x.device().is_cuda() && deferred->z().shape() == x.shape() &&
                     kernels::cuda::depthwise_fuses_bn_act(s, deferred->act())
                 ? conv_forward_bn_act_raw(*deferred, weight, bias, s)
                 : conv_forward_raw(x, weight, bias, s);
  // Note [Recomputed convolutions] (nn/functional.h).
  if (opt.recompute_output && autograd::has_recipe(x)) {
    autograd::set_recipe(y, "conv2d", {x, weight, bias}, [s](const std::vector<Tensor>& in) {
      return conv_forward_raw(in[0], in[1], in[2], s);
    });
  }
  bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  bool need_b = bias.defined() && bias.requires_grad();
  // Note [Batch norm inside the depthwise convolution] (kernels/conv.h): a depthwise conv whose
  // input is a batch norm's output keeps that recipe's inputs, the same storages the recipe
  // would keep, and hands them to the weight gradient, which loads z (on every device, so that
  // the meta device predicts the same buffers).
  // dw and db come from one kernel, which reads x: either asks for x.
  const bool need_wb = need_w || need_b;
  std::shared_ptr<const autograd::Recipe> bn_recipe = need_wb ? autograd::recipe_of(x) : nullptr;
  std::optional<Activation> bn_act =
      bn_recipe != nullptr ? batch_norm_recipe_activation(bn_recipe->name) : std::nullopt;
  if (bn_act.has_value() && !kernels::cuda::depthwise_fuses_bn_act(s, *bn_act)) bn_act.reset();
  std::vector<autograd::SavedTensor> saved{need_wb ? x : Tensor(), need_x ? weight : Tensor()};
  if (bn_act.has_value()) {  // the recipe's {z, gamma, beta, mean, invstd}
    saved = {bn_recipe->inputs[0], need_x ? weight : Tensor(), bn_recipe->inputs[1],
             bn_recipe->inputs[2], bn_recipe->inputs[3],       bn_recipe->inputs[4]};
  }
  return autograd::record(
      "conv2d", {x, weight, bias}, y, std::move(saved),
      [s, need_x, need_w, need_b, bn_act, dx_dtype = x.dtype(),
       dw_dtype = autocast::grad_dtype(weight), db_dtype = autocast::grad_dtype(bias)](
          const std::vector<Tensor>& g, std::vector<Tensor>& saved) {
        BnInput bn;
        if (bn_act.has_value()) bn = {*bn_act, {saved[2], saved[3], saved[4], saved[5]}};
        std::vector<Tensor> d =
            conv_backward_raw(g[0], std::move(saved[0]), saved[1], need_x, need_w, need_b, s,
                              dw_dtype, bn_act.has_value() ? &bn : nullptr);
        return std::vector<Tensor>{d[0].defined() ? cast_raw(d[0], dx_dtype) : d[0],
                                   d[1].defined() ? cast_raw(d[1], dw_dtype) : d[1],
                                   d[2].defined() ? cast_raw(d[2], db_dtype) : d[2]};
      });
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  memory::OpScope op_scope("linear");  // Note [Allocation events]
  // Lowered here (not only in matmul) so the bias add stays in the low-precision dtype.
  const Tensor x = autocast::apply(AutocastOp::linear, x_in);
  const Tensor weight = autocast::apply(AutocastOp::linear, w_in);
  const Tensor bias = autocast::apply(AutocastOp::linear, b_in);
  FRUGAL_CHECK(x.ndim() >= 1 && weight.ndim() == 2 && x.size(-1) == weight.size(1),
               "linear: input ", describe(x), " does not match weight ", describe(weight),
               " (expected [..., ", weight.ndim() == 2 ? weight.size(1) : -1, "])");
  Tensor x2 = x.ndim() == 2 ? x : x.reshape(Shape{-1, x.size(-1)});
  Tensor y = matmul(x2, weight, /*trans_b=*/true);
  if (bias.defined()) {
    FRUGAL_CHECK(bias.shape() == Shape{weight.size(0)}, "linear: bias ", describe(bias),
                 " does not match weight ", describe(weight));
    y = add(y, bias);
  }
  if (x.ndim() == 2) return y;
  std::vector<int64_t> dims = x.shape().dims();
  dims.back() = weight.size(0);
  return y.reshape(Shape(dims));
}

}  // namespace frugal::nn::functional
