// The shared step: validate all gradients, then update each parameter.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/factory.h"
#include "core/flat_tensors.h"
#include "core/ops.h"
#include "optim/state_io.h"

namespace frugal::optim {

namespace {

// A learning rate every entry takes (the constructor, set_lr, a loaded state): finite and >= 0.
void check_lr(double lr, const char* where) {
  FRUGAL_CHECK(lr >= 0 && std::isfinite(lr), where, ": learning rate must be finite and >= 0, got ",
               lr);
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  check_lr(lr, "optimizer");
  std::unordered_map<const TensorImpl*, size_t> index;  // parameter -> its first position
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    FRUGAL_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "optimizer: parameter ", i,
                 " must be a leaf tensor that requires grad");
    FRUGAL_CHECK(p.dtype() == DType::f32, "optimizer: parameter ", i, " is ", describe(p),
                 "; master weights must be f32");
    // Given twice, it would be stepped twice a step (torch warns, and will refuse).
    auto [first, fresh] = index.emplace(&p.impl(), i);
    FRUGAL_CHECK(fresh, "optimizer: parameters ", first->second, " and ", i,
                 " are the same tensor; give each parameter once (Module::parameters() lists "
                 "tied weights once)");
  }
}

void Optimizer::step() {
  // Check everything before touching anything: a failed step loses nothing.
  if (found_inf_.defined()) {
    FRUGAL_CHECK(found_inf_.numel() == 1 && found_inf_.dtype() == DType::f32, name(),
                 ": found_inf flag must be an f32 scalar, got ", describe(found_inf_));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    FRUGAL_CHECK(g.shape() == p.shape() && g.dtype() == DType::f32 && g.device() == p.device(),
                 name(), ": gradient ", describe(g), " of parameter ", i, " does not match ",
                 describe(p), " (f32 on the parameter's device expected)");
    // The update kernels read the flag on the parameter's device (found_inf_ptr): checked here,
    // not at the parameter's update, after the ones before it changed.
    FRUGAL_CHECK(!found_inf_.defined() || p.device().is_meta() || found_inf_.device() == p.device(),
                 name(), ": found_inf on ", found_inf_.device(), " but parameter ", i, " on ",
                 p.device());
  }
  std::vector<size_t> indices;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().defined()) indices.push_back(i);
  }
  const std::string op = name() + " step";  // tags the state made lazily (Note [Allocation events])
  memory::OpScope op_scope(op.c_str());
  update_all(indices);
  for (size_t i : indices) params_[i].bump_version();
}

void Optimizer::update_all(const std::vector<size_t>& indices) {
  for (size_t i : indices) update(i, params_[i], params_[i].grad());
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

void Optimizer::set_lr(double lr) {
  check_lr(lr, "optimizer: set_lr");
  lr_ = lr;
  if (lr_device_.defined()) fill_(lr_device_, lr);
}

double Optimizer::schedule_base_lr() {
  if (!initial_lr_) initial_lr_ = lr_;
  return *initial_lr_;
}

NamedTensors Optimizer::common_state() const {
  NamedTensors out = {{"lr", scalar_tensor(lr_)},
                      {"param_count", scalar_tensor(static_cast<double>(params_.size()))}};
  if (initial_lr_) out.emplace_back("initial_lr", scalar_tensor(*initial_lr_));
  return out;
}

Optimizer::CommonState Optimizer::load_common(StateReader& r) const {
  const std::string where = name() + " state";
  CommonState c{r.scalar("lr"), r.optional_scalar("initial_lr"), false};
  check_lr(c.lr, where.c_str());
  if (c.initial_lr) check_lr(*c.initial_lr, (where + ": initial_lr").c_str());
  std::optional<double> count = r.optional_scalar("param_count");
  c.has_hyper_parameters = count.has_value();
  FRUGAL_CHECK(!count || *count == static_cast<double>(params_.size()), where, ": saved for ",
               count.value_or(0), " parameters, but this optimizer has ", params_.size());
  return c;
}

void Optimizer::apply_common(const CommonState& c) {
  set_lr(c.lr);
  if (c.initial_lr) initial_lr_ = c.initial_lr;  // state saved without one keeps this run's
}

void Optimizer::keep_lr_on_device(Device device) {
  if (lr_device_.defined() && lr_device_.device() == device) return;
  lr_device_ = full({}, lr_, {.device = device});
}

const float* Optimizer::lr_device_ptr(const Tensor& param) const {
  if (!lr_device_.defined() || lr_device_.device() != param.device()) return nullptr;
  return lr_device_.data<float>();
}

const float* Optimizer::found_inf_ptr(const Tensor& param) const {
  if (!found_inf_.defined()) return nullptr;
  FRUGAL_CHECK(found_inf_.device() == param.device(), name(), ": found_inf on ",
               found_inf_.device(), " but parameter on ", param.device());
  return found_inf_.data<float>();
}

std::vector<Tensor> Optimizer::make_state(const std::vector<size_t>& indices, bool scalars) const {
  std::vector<Tensor> out(indices.size());
  std::vector<Device> devices;  // the CUDA devices among the parameters, each made in one go
  for (size_t k = 0; k < indices.size(); ++k) {
    const Tensor& p = params_[indices[k]];
    const Shape shape = scalars ? Shape{} : p.shape();
    if (!p.device().is_cuda()) {
      out[k] = zeros(shape, p.options());
    } else if (std::find(devices.begin(), devices.end(), p.device()) == devices.end()) {
      devices.push_back(p.device());
    }
  }
  for (Device device : devices) {
    std::vector<FlatSpec> specs;
    std::vector<size_t> at;
    for (size_t k = 0; k < indices.size(); ++k) {
      const Tensor& p = params_[indices[k]];
      if (p.device() != device) continue;
      specs.push_back({scalars ? Shape{} : p.shape(), p.options()});
      at.push_back(k);
    }
    std::vector<Tensor> made = zeros_flat(specs);
    for (size_t j = 0; j < at.size(); ++j) out[at[j]] = std::move(made[j]);
  }
  return out;
}

std::vector<Tensor> Optimizer::state_from(const std::vector<Tensor>& loaded) const {
  std::vector<size_t> indices;
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (loaded[i].defined()) indices.push_back(i);
  }
  std::vector<Tensor> made = make_state(indices);  // all of it before any copy
  std::vector<Tensor> out(loaded.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    copy_(made[k], loaded[indices[k]].detach());
    out[indices[k]] = std::move(made[k]);
  }
  return out;
}

}  // namespace frugal::optim
