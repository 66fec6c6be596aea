// Module bookkeeping: registration, recursive naming, modes and device moves.
#include "nn/module.h"

#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/flat_tensors.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"
#include "memory/events.h"

namespace frugal::nn {

namespace {

// A child's dotted prefix; a child under an empty name (a wrapper's) shares its parent's.
std::string child_prefix(const std::string& prefix, const std::string& name) {
  return name.empty() ? prefix : prefix + name + ".";
}

}  // namespace

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
    child->collect(child_prefix(prefix, name), params, out);
  }
}

namespace {

// The first entry of each tensor (by identity), in order.
NamedTensors without_duplicates(NamedTensors all) {
  std::unordered_set<const TensorImpl*> seen;
  NamedTensors out;
  for (auto& [name, t] : all) {
    if (seen.insert(&t.impl()).second) out.emplace_back(std::move(name), std::move(t));
  }
  return out;
}

}  // namespace

NamedTensors Module::named_parameters(bool remove_duplicate) const {
  NamedTensors out;
  collect("", true, out);
  return remove_duplicate ? without_duplicates(std::move(out)) : out;
}

NamedTensors Module::named_buffers(bool remove_duplicate) const {
  NamedTensors out;
  collect("", false, out);
  return remove_duplicate ? without_duplicates(std::move(out)) : out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  if (!recurse) {
    for (const auto& [name, t] : params_) out.push_back(t);
    return out;
  }
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1), this);
  for (auto& [name, child] : children_) child->collect_modules(child_prefix(prefix, name), out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (auto& [name, m] : named_modules()) out.push_back(m);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_) child->apply(fn);
  fn(*this);
}

void Module::collect_state(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect_state(child_prefix(prefix, name), out);
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect_state("", out);
  return out;
}

Module::LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) given.emplace(name, &t);
  LoadResult result;
  std::vector<std::pair<Tensor, const Tensor*>> copies;  // destination, source
  std::unordered_map<std::string, bool> own;
  for (const auto& [name, dst] : state_dict()) {
    own.emplace(name, true);
    auto it = given.find(name);
    if (it == given.end()) {
      result.missing.push_back(name);
      continue;
    }
    const Tensor& src = *it->second;
    FRUGAL_CHECK(src.defined() && src.shape() == dst.shape(), "load_state_dict: '", name,
                 "' has shape ", src.defined() ? src.shape().str() : std::string("(undefined)"),
                 " in the state, ", dst.shape(), " in the ", type_name());
    copies.emplace_back(dst, &src);
  }
  for (const auto& [name, t] : state) {
    if (!own.count(name)) result.unexpected.push_back(name);
  }
  if (strict && (!result.missing.empty() || !result.unexpected.empty())) {
    std::string missing, unexpected;
    for (const auto& n : result.missing) missing += (missing.empty() ? "" : ", ") + n;
    for (const auto& n : result.unexpected) unexpected += (unexpected.empty() ? "" : ", ") + n;
    FRUGAL_FAIL("load_state_dict (strict) into ", type_name(), ": missing [", missing,
                "], unexpected [", unexpected, "]; nothing was loaded");
  }
  autograd::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) copy_(dst, *src);
  return result;
}

void Module::convert_in_place(const std::function<Tensor(const Tensor&)>& convert) {
  auto adopt = [&](const Tensor& t) {
    Tensor converted = convert(t);
    if (converted.same(t)) return;
    // In place: every handle to the parameter or buffer sees the new device or dtype.
    t.impl().storage = converted.impl().storage;
    t.impl().dtype = converted.dtype();
    t.impl().grad.reset();
  };
  for (auto& [name, t] : named_parameters()) adopt(t);
  for (auto& [name, t] : named_buffers()) adopt(t);
}

void Module::to(DType dtype) {
  FRUGAL_CHECK(is_floating(dtype), "Module::to: expected a floating dtype, got ", dtype);
  convert_in_place([dtype](const Tensor& t) {
    return !is_floating(t.dtype()) || t.dtype() == dtype ? t : t.detach().to(dtype);
  });
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
  if (!device.is_cuda()) {
    convert_in_place(
        [device](const Tensor& t) { return t.device() == device ? t : t.detach().to(device); });
    return;
  }
  // On CUDA, everything that moves takes one allocation (Note [Flat resident tensors]); a
  // tensor registered twice (tied weights) moves once.
  memory::OpScope op_scope("to");  // Note [Allocation events]
  std::vector<Tensor> moving;
  std::unordered_map<const TensorImpl*, size_t> index;  // into moving
  auto collect = [&](const Tensor& t) {
    if (t.device() != device && index.emplace(&t.impl(), moving.size()).second) {
      moving.push_back(t);
    }
  };
  for (auto& [name, t] : named_parameters()) collect(t);
  for (auto& [name, t] : named_buffers()) collect(t);
  std::vector<FlatSpec> specs;
  for (const Tensor& t : moving) {
    FRUGAL_CHECK(!t.device().is_meta(), "Module::to: cannot materialise data of a meta tensor ",
                 "on ", device);
    specs.push_back({t.shape(), {t.dtype(), device}});
  }
  std::vector<Tensor> moved = empty_flat(specs);  // may throw: nothing has moved yet
  const kernels::Context ctx = kernels::Context::of(device);
  for (size_t i = 0; i < moving.size(); ++i) {
    kernels::copy_bytes(ctx, device, moved[i].data_ptr(), moving[i].device(), moving[i].data_ptr(),
                        moving[i].nbytes());
  }
  convert_in_place([&](const Tensor& t) {
    auto it = index.find(&t.impl());
    return it == index.end() ? t : moved[it->second];
  });
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

void Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  FRUGAL_CHECK(m != nullptr, type_name(), ": replace_child('", name, "') with a null module");
  for (auto& [child_name, child] : children_) {
    if (child_name != name) continue;
    if (!m->named_) m->name_ = name, m->named_ = true;
    child = std::move(m);
    return;
  }
  FRUGAL_FAIL(type_name(), ": no child named '", name, "' to replace");
}

void Sequential::wrap(size_t i,
                      const std::function<std::shared_ptr<Module>(std::shared_ptr<Module>)>& fn) {
  FRUGAL_CHECK(i < layers_.size(), "Sequential::wrap: layer ", i, " of ", layers_.size());
  std::shared_ptr<Module> wrapped = fn(layers_[i]);
  replace_child(std::to_string(i), wrapped);
  layers_[i] = std::move(wrapped);
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
