// SGD with momentum, dampening, nesterov and weight decay (PyTorch's semantics).
#include "core/factory.h"
#include "core/ops.h"
#include "kernels/optim.h"
#include "optim/optimizer.h"
#include "optim/state_io.h"

namespace frugal::optim {

SGD::SGD(std::vector<Tensor> params, SgdOptions opt)
    : Optimizer(std::move(params), opt.lr), opt_(opt) {
  FRUGAL_CHECK(opt.momentum >= 0 && opt.weight_decay >= 0 && opt.dampening >= 0,
               "sgd: momentum, dampening and weight_decay must be >= 0");
  FRUGAL_CHECK(!opt.nesterov || (opt.momentum > 0 && opt.dampening == 0),
               "sgd: nesterov momentum requires a momentum and zero dampening");
  momentum_.resize(params_.size());
}

void SGD::update(size_t i, const Tensor& param, const Tensor& grad) {
  kernels::SgdParams k;
  k.lr = lr_, k.momentum = opt_.momentum, k.dampening = opt_.dampening;
  k.weight_decay = opt_.weight_decay, k.nesterov = opt_.nesterov;
  k.first_step = !momentum_[i].defined();
  if (opt_.momentum != 0 && k.first_step) momentum_[i] = zeros(param.shape(), param.options());
  if (param.device().is_meta()) return;
  kernels::sgd_step(kernels::Context::of(param.device()), param.numel(), param.data<float>(),
                    grad.data<float>(), opt_.momentum != 0 ? momentum_[i].data<float>() : nullptr,
                    k, found_inf_ptr(param));
}

NamedTensors SGD::state_dict() const {
  NamedTensors out = {{"lr", scalar_tensor(lr_)}};
  for (size_t i = 0; i < momentum_.size(); ++i) {
    if (momentum_[i].defined()) out.emplace_back(state_name(i, "momentum_buffer"), momentum_[i]);
  }
  return out;
}

void SGD::load_state_dict(const NamedTensors& state) {
  StateReader r(name(), state, params_);
  double lr = r.scalar("lr");
  std::vector<Tensor> buffers(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) buffers[i] = r.optional_like(i, "momentum_buffer");
  r.check_all_used();
  lr_ = lr;
  for (size_t i = 0; i < params_.size(); ++i) {
    momentum_[i] = buffers[i].defined() ? buffers[i].detach().clone().to(params_[i].device()) : Tensor();
  }
}

}  // namespace frugal::optim
