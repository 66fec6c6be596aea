// AdamW with decoupled weight decay and bias correction (PyTorch's semantics).
#include <cmath>

#include "core/factory.h"
#include "core/ops.h"
#include "kernels/amp.h"
#include "kernels/optim.h"
#include "optim/optimizer.h"
#include "optim/state_io.h"

namespace frugal::optim {

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions opt)
    : Optimizer(std::move(params), opt.lr), opt_(opt) {
  FRUGAL_CHECK(opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1 && opt.eps >= 0,
               "adamw: betas must be in [0, 1) and eps >= 0");
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  steps_.resize(params_.size());
}

void AdamW::update_all(const std::vector<size_t>& indices) {
  // All missing state is made before any parameter is updated: an allocation that fails (out of
  // memory) leaves weights and state as they were (Note [Recovering from out of memory]).
  std::vector<size_t> missing;
  for (size_t i : indices) {
    if (!exp_avg_[i].defined()) missing.push_back(i);
  }
  std::vector<Tensor> exp_avg = make_state(missing);  // Note [Flat resident tensors]
  std::vector<Tensor> exp_avg_sq = make_state(missing);
  std::vector<Tensor> steps = make_state(missing, /*scalars=*/true);
  for (size_t k = 0; k < missing.size(); ++k) {
    exp_avg_[missing[k]] = std::move(exp_avg[k]);
    exp_avg_sq_[missing[k]] = std::move(exp_avg_sq[k]);
    steps_[missing[k]] = std::move(steps[k]);
  }
  Optimizer::update_all(indices);
}

void AdamW::update(size_t i, const Tensor& param, const Tensor& grad) {
  kernels::AdamWParams k;
  k.lr = lr_, k.beta1 = opt_.beta1, k.beta2 = opt_.beta2, k.eps = opt_.eps;
  k.weight_decay = opt_.weight_decay;
  if (param.device().is_meta()) return;
  kernels::Context ctx = kernels::Context::of(param.device());
  kernels::count_step(ctx, steps_[i].data<float>(), found_inf_ptr(param));
  k.step_count = steps_[i].data<float>();
  k.lr_device = lr_device_ptr(param);
  kernels::adamw_step(ctx, param.numel(), param.data<float>(), grad.data<float>(),
                      exp_avg_[i].data<float>(), exp_avg_sq_[i].data<float>(), k,
                      found_inf_ptr(param));
}

NamedTensors AdamW::state_dict() const {
  NamedTensors out = {{"lr", scalar_tensor(lr_)}};
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    out.emplace_back(state_name(i, "exp_avg"), exp_avg_[i]);
    out.emplace_back(state_name(i, "exp_avg_sq"), exp_avg_sq_[i]);
    // Reads the device count back: state_dict is a documented synchronisation point.
    out.emplace_back(state_name(i, "step"),
                     scalar_tensor(steps_[i].device().is_meta() ? 0.0 : steps_[i].item()));
  }
  return out;
}

void AdamW::load_state_dict(const NamedTensors& state) {
  StateReader r(name(), state, params_);
  double lr = r.scalar("lr");
  std::vector<Tensor> m(params_.size()), v(params_.size());
  std::vector<double> steps(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    m[i] = r.optional_like(i, "exp_avg");
    v[i] = r.optional_like(i, "exp_avg_sq");
    FRUGAL_CHECK(m[i].defined() == v[i].defined(), "adamw state: parameter ", i,
                 " has only one of exp_avg and exp_avg_sq");
    if (!m[i].defined()) continue;
    steps[i] = r.scalar(state_name(i, "step"));
    // A step count the kernels can use: t = 0 at the update would divide by 1 - beta^0 = 0, and
    // a negative or fractional count is no count. A negative second moment has no square root.
    FRUGAL_CHECK(steps[i] >= 0 && steps[i] == std::floor(steps[i]),
                 "adamw state: ", state_name(i, "step"), " must be a whole number >= 0, got ",
                 steps[i]);
    FRUGAL_CHECK(v[i].numel() == 0 || amax(mul(v[i], -1.0)).item() <= 0,
                 "adamw state: ", state_name(i, "exp_avg_sq"), " has a negative value");
  }
  r.check_all_used();
  // Made in full before anything is replaced (Note [Flat resident tensors]).
  std::vector<Tensor> exp_avg = state_from(m), exp_avg_sq = state_from(v);
  std::vector<size_t> with_state;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (m[i].defined()) with_state.push_back(i);
  }
  std::vector<Tensor> counts = make_state(with_state, /*scalars=*/true);
  std::vector<Tensor> step_counts(params_.size());
  for (size_t k = 0; k < with_state.size(); ++k) {
    fill_(counts[k], steps[with_state[k]]);
    step_counts[with_state[k]] = std::move(counts[k]);
  }
  set_lr(lr);
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  steps_ = std::move(step_counts);
}

std::vector<Tensor> AdamW::state_tensors() const {
  std::vector<Tensor> out;
  for (const auto* list : {&exp_avg_, &exp_avg_sq_, &steps_}) {
    for (const Tensor& t : *list) {
      if (t.defined()) out.push_back(t);
    }
  }
  return out;
}

}  // namespace frugal::optim
