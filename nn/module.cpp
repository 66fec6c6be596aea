// Module bookkeeping: registration, recursive naming, modes and device moves.
#include "nn/module.h"

#include <sstream>

#include "core/op_util.h"

namespace frugal::nn {

Tensor Module::register_parameter(std::string name, Tensor t) {
  FRUGAL_CHECK(t.defined(), "register_parameter: '", name, "' is undefined");
  if (!t.requires_grad()) t.requires_grad_(true);
  params_.emplace_back(std::move(name), t);
  return t;
}

Tensor Module::register_buffer(std::string name, Tensor t) {
  buffers_.emplace_back(std::move(name), t);
  return t;
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(prefix + name, t);
  // A child under an empty name (a wrapper's, such as nn::Checkpoint's) shares its parent's names.
  for (const auto& [name, child] : children_) {
    child->collect(name.empty() ? prefix : prefix + name + ".", params, out);
  }
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

void Module::to(Device device) {
  auto move = [&](const Tensor& t) {
    if (t.device() == device) return;
    Tensor moved = t.detach().to(device);
    t.impl().storage = moved.impl().storage;  // in place: every handle sees the new device
    t.impl().grad.reset();
  };
  for (auto& [name, t] : named_parameters()) move(t);
  for (auto& [name, t] : named_buffers()) move(t);
}

std::string Module::str(int indent) const {
  std::ostringstream os;
  os << type_name() << "(" << extra_repr();
  if (!children_.empty()) {
    os << "\n";
    for (const auto& [name, child] : children_) {
      os << std::string(static_cast<size_t>(indent + 2), ' ') << "(" << name
         << "): " << child->str(indent + 2) << "\n";
    }
    os << std::string(static_cast<size_t>(indent), ' ');
  }
  os << ")";
  return os.str();
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  FRUGAL_CHECK(m != nullptr, "Sequential: null module at index ", layers_.size());
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
}

Tensor Module::forward_with_activation(const Tensor& /*x*/, kernels::Activation act) {
  FRUGAL_FAIL(type_name(), ": forward_with_activation(", static_cast<int>(act),
              ") called on a layer that does not take an activation");
}

Tensor Sequential::forward(const Tensor& x) {
  return forward_range(0, static_cast<int64_t>(layers_.size()), x);
}

Tensor Sequential::forward_range(int64_t begin, int64_t end, const Tensor& x) const {
  FRUGAL_CHECK(0 <= begin && begin <= end && end <= static_cast<int64_t>(layers_.size()),
               "Sequential::forward_range: [", begin, ", ", end, ") outside ", layers_.size(),
               " layers");
  Tensor h = x;
  run(static_cast<size_t>(begin), static_cast<size_t>(end), h);
  return h;
}

void Sequential::run(size_t begin, size_t end, Tensor& h) const {
  for (size_t i = begin; i < end; ++i) {
    if (const Sequential* inner = layers_[i]->as_plain_sequential()) {
      autograd::ModuleScope scope(inner->name());
      inner->run(0, inner->layers_.size(), h);  // Note [Flat sequential runs]
      continue;
    }
    std::optional<kernels::Activation> next_act;
    if (i + 1 < end && layers_[i]->takes_activation()) {
      next_act = layers_[i + 1]->as_activation();
    }
    if (next_act) {  // Note [Fused activations]
      autograd::ModuleScope scope(layers_[i]->name());
      h = layers_[i]->forward_with_activation(h, *next_act);
      ++i;
    } else {
      h = (*layers_[i])(h);
    }
  }
}

}  // namespace frugal::nn
