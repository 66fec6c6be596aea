// dropout and cross_entropy, forward and backward.
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/loss.h"
#include "kernels/random.h"
#include "nn/functional.h"

namespace frugal::nn::functional {

using detail::cast_raw;

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  memory::OpScope op_scope("dropout");  // Note [Allocation events]
  detail::check_defined("dropout", {&x});
  FRUGAL_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  const DType dt = detail::cpu_half(x) ? DType::f32 : x.dtype();
  Tensor xc = cast_raw(x, dt);
  Tensor y = Tensor::empty(x.shape(), {dt, x.device()});
  // The draw is reserved even on meta so a dry run advances the generator like a real one.
  const Generator::Draw draw = gen.draw(static_cast<uint64_t>(x.numel()));
  kernels::dropout_forward(detail::ctx_of(x), dt, x.numel(), xc.data_ptr(), p, draw.seed,
                           draw.offset, draw.offset_base, y.data_ptr(), nullptr);
  y = cast_raw(y, x.dtype());
  // Nothing is saved: backward draws the same mask again from the draw (inside a captured graph
  // the counter behind offset_base moves only at the end of a replay, so forward and backward of
  // one replay read the same value).
  return autograd::record(
      "dropout", {x}, y, {},
      [p, draw, dtype = x.dtype()](const std::vector<Tensor>& g, const std::vector<Tensor>&) {
        const DType dt = detail::cpu_half(g[0]) ? DType::f32 : dtype;
        Tensor gc = cast_raw(cast_raw(g[0], dtype), dt);
        Tensor dx = Tensor::empty(gc.shape(), gc.options());
        kernels::dropout_forward(detail::ctx_of(gc), dt, gc.numel(), gc.data_ptr(), p, draw.seed,
                                 draw.offset, draw.offset_base, dx.data_ptr(), nullptr);
        return std::vector<Tensor>{cast_raw(dx, dtype)};
      });
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels, CrossEntropyOptions opt) {
  memory::OpScope op_scope("cross_entropy");  // Note [Allocation events]
  detail::check_same_device("cross_entropy", {&logits_in, &labels});
  const Tensor logits = autocast::apply(AutocastOp::cross_entropy, logits_in);
  FRUGAL_CHECK(logits.ndim() == 2, "cross_entropy: expected logits [N, C], got ", describe(logits));
  FRUGAL_CHECK(labels.dtype() == DType::i64 && labels.shape() == Shape{logits.size(0)},
               "cross_entropy: expected labels i64 [", logits.size(0), "], got ", describe(labels));
  FRUGAL_CHECK(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0,
               "cross_entropy: label_smoothing must be in [0, 1], got ", opt.label_smoothing);
  detail::check_floating("cross_entropy", logits);
  const int64_t n = logits.size(0), c = logits.size(1);
  // Losses run in f32 whatever the logits' dtype (autocast's f32 policy).
  const DType dt = acc_dtype(logits.dtype());
  Tensor lc = cast_raw(logits, dt);
  Tensor loss = Tensor::empty(Shape{n}, {dt, logits.device()});
  Tensor lse = Tensor::empty(Shape{n}, {dt, logits.device()});
  kernels::cross_entropy_forward(detail::ctx_of(lc), dt, n, c, lc.data_ptr(),
                                 labels.data<int64_t>(), opt.label_smoothing, loss.data_ptr(),
                                 lse.data_ptr());
  Tensor per_row = autograd::record(
      "cross_entropy", {logits}, loss, {lc, labels, lse},
      [n, c, s = opt.label_smoothing, dtype = logits.dtype()](const std::vector<Tensor>& g,
                                                              const std::vector<Tensor>& saved) {
        const Tensor &lc = saved[0], &labels = saved[1], &lse = saved[2];
        Tensor gc = cast_raw(g[0], lc.dtype());
        Tensor dlogits = Tensor::empty(lc.shape(), lc.options());
        kernels::cross_entropy_backward(detail::ctx_of(gc), lc.dtype(), n, c, lc.data_ptr(),
                                        labels.data<int64_t>(), s, lse.data_ptr(), gc.data_ptr(),
                                        dlogits.data_ptr());
        return std::vector<Tensor>{cast_raw(dlogits, dtype)};
      });
  switch (opt.reduction) {
    case Reduction::mean:
      return mean(per_row);
    case Reduction::sum:
      return sum(per_row);
    case Reduction::none:
      return per_row;
  }
  return per_row;
}

}  // namespace frugal::nn::functional
