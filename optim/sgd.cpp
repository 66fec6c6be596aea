// SGD with momentum, dampening, nesterov and weight decay (PyTorch's semantics).
#include <algorithm>

#include "core/factory.h"
#include "core/ops.h"
#include "kernels/optim.h"
#include "optim/optimizer.h"
#include "optim/state_io.h"

namespace frugal::optim {

void check_options(const SgdOptions& o, const char* where) {
  FRUGAL_CHECK(o.momentum >= 0 && o.weight_decay >= 0 && o.dampening >= 0, where,
               ": momentum, dampening and weight_decay must be >= 0, got ", o.momentum, ", ",
               o.dampening, " and ", o.weight_decay);
  FRUGAL_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), where,
               ": nesterov momentum requires a momentum and zero dampening");
}

SGD::SGD(std::vector<Tensor> params, SgdOptions opt)
    : Optimizer(std::move(params), opt.lr), opt_(opt) {
  check_options(opt, "sgd");
  momentum_.resize(params_.size());
}

void SGD::update(size_t i, const Tensor& param, const Tensor& grad) {
  (void)param, (void)grad;  // the same tensors as params_[i] and its gradient
  update_all({i});
}

// One kernels::sgd_step_many per device and kind of step (a parameter's first step starts its
// momentum buffer from the gradient), in the order of the parameters.
void SGD::update_all(const std::vector<size_t>& indices) {
  struct Batch {
    Device device;
    bool first_step;
    std::vector<float*> params, bufs;
    std::vector<const float*> grads;
    std::vector<int64_t> sizes;
    const float* found_inf;
    const float* lr_device;
  };
  std::vector<Batch> batches;
  const bool momentum = opt_.momentum != 0;
  // Every missing momentum buffer is made before any is stored: an allocation that fails (out of
  // memory) leaves the state as it was (Note [Recovering from out of memory]).
  std::vector<char> first(params_.size(), 0);
  std::vector<size_t> missing;
  for (size_t i : indices) {
    first[i] = momentum_[i].defined() ? 0 : 1;
    if (momentum && first[i] != 0) missing.push_back(i);
  }
  std::vector<Tensor> made = make_state(missing);  // Note [Flat resident tensors]
  for (size_t k = 0; k < missing.size(); ++k) momentum_[missing[k]] = std::move(made[k]);
  for (size_t i : indices) {
    const Tensor& p = params_[i];
    if (p.device().is_meta()) continue;
    auto it = std::find_if(batches.begin(), batches.end(), [&](const Batch& b) {
      return b.device == p.device() && b.first_step == (first[i] != 0);
    });
    if (it == batches.end()) {
      batches.push_back(
          {p.device(), first[i] != 0, {}, {}, {}, {}, found_inf_ptr(p), lr_device_ptr(p)});
      it = batches.end() - 1;
    }
    it->params.push_back(p.data<float>());
    it->grads.push_back(p.grad().data<float>());
    it->bufs.push_back(momentum ? momentum_[i].data<float>() : nullptr);
    it->sizes.push_back(p.numel());
  }
  for (const Batch& b : batches) {
    kernels::SgdParams k;
    k.lr = lr_, k.momentum = opt_.momentum, k.dampening = opt_.dampening;
    k.weight_decay = opt_.weight_decay, k.nesterov = opt_.nesterov;
    k.first_step = b.first_step;
    k.lr_device = b.lr_device;
    kernels::sgd_step_many(kernels::Context::of(b.device), static_cast<int64_t>(b.params.size()),
                           b.params.data(), b.grads.data(), b.bufs.data(), b.sizes.data(), k,
                           b.found_inf);
  }
}

NamedTensors SGD::state_dict() const {
  NamedTensors out = common_state();
  out.emplace_back("momentum", scalar_tensor(opt_.momentum));
  out.emplace_back("dampening", scalar_tensor(opt_.dampening));
  out.emplace_back("weight_decay", scalar_tensor(opt_.weight_decay));
  out.emplace_back("nesterov", scalar_tensor(opt_.nesterov ? 1.0 : 0.0));
  for (size_t i = 0; i < momentum_.size(); ++i) {
    if (momentum_[i].defined()) out.emplace_back(state_name(i, "momentum_buffer"), momentum_[i]);
  }
  return out;
}

void SGD::load_state_dict(const NamedTensors& state) {
  StateReader r(name(), state, params_);
  const CommonState common = load_common(r);
  SgdOptions o = opt_;
  if (common.has_hyper_parameters) {
    o.momentum = r.scalar("momentum");
    o.dampening = r.scalar("dampening");
    o.weight_decay = r.scalar("weight_decay");
    const double nesterov = r.scalar("nesterov");
    FRUGAL_CHECK(nesterov == 0 || nesterov == 1, "sgd state: nesterov must be 0 or 1, got ",
                 nesterov);
    o.nesterov = nesterov == 1;
    check_options(o, "sgd state");
  }
  std::vector<Tensor> buffers(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) buffers[i] = r.optional_like(i, "momentum_buffer");
  r.check_all_used();
  std::vector<Tensor> loaded = state_from(buffers);  // Note [Flat resident tensors]
  apply_common(common);
  opt_ = o;
  momentum_ = std::move(loaded);
}

std::vector<Tensor> SGD::state_tensors() const {
  std::vector<Tensor> out;
  for (const Tensor& m : momentum_) {
    if (m.defined()) out.push_back(m);
  }
  return out;
}

}  // namespace frugal::optim
