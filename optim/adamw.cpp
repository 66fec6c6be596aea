// AdamW with decoupled weight decay and bias correction (PyTorch's semantics).
#include <cmath>

#include "core/factory.h"
#include "core/ops.h"
#include "kernels/amp.h"
#include "kernels/optim.h"
#include "optim/optimizer.h"
#include "optim/state_io.h"

namespace frugal::optim {

// As torch.optim.AdamW's: comparisons that NaN fails, so NaN is refused too.
void check_options(const AdamWOptions& o, const char* where) {
  FRUGAL_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, where,
               ": betas must be in [0, 1), got ", o.beta1, " and ", o.beta2);
  FRUGAL_CHECK(o.eps >= 0 && o.weight_decay >= 0, where,
               ": eps and weight_decay must be >= 0, got ", o.eps, " and ", o.weight_decay);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions opt)
    : Optimizer(std::move(params), opt.lr), opt_(opt) {
  check_options(opt, "adamw");
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
  NamedTensors out = common_state();
  out.emplace_back("beta1", scalar_tensor(opt_.beta1));
  out.emplace_back("beta2", scalar_tensor(opt_.beta2));
  out.emplace_back("eps", scalar_tensor(opt_.eps));
  out.emplace_back("weight_decay", scalar_tensor(opt_.weight_decay));
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
  const CommonState common = load_common(r);
  AdamWOptions o = opt_;
  if (common.has_hyper_parameters) {
    o.beta1 = r.scalar("beta1");
    o.beta2 = r.scalar("beta2");
    o.eps = r.scalar("eps");
    o.weight_decay = r.scalar("weight_decay");
    check_options(o, "adamw state");
  }
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
  apply_common(common);
  opt_ = o;
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
