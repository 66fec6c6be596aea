// Saved tensors and recipes (Note [Saved tensors] in core/saved_tensor.h).
#include "core/saved_tensor.h"

#include "core/autograd.h"

namespace frugal::autograd {

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  if (auto recipe = recipe_of(t)) {
    recipe_ = std::move(recipe);
    return;
  }
  data_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::unpack(const std::string& op) const {
  if (recipe_ != nullptr) {
    std::vector<Tensor> in;
    in.reserve(recipe_->inputs.size());
    for (const SavedTensor& s : recipe_->inputs) in.push_back(s.unpack(op));
    NoGradGuard no_grad;
    Tensor out = recipe_->compute(in);
    FRUGAL_CHECK(out.shape() == recipe_->shape && out.dtype() == recipe_->dtype, op,
                 ": recomputing a saved tensor with '", recipe_->name, "' gave ", describe(out),
                 ", expected ", recipe_->shape, " ", recipe_->dtype);
    return out;
  }
  if (!data_.defined()) return Tensor();
  FRUGAL_CHECK(data_.version() == version_, op, ": one of the tensors it saved for backward (",
               describe(data_), ") was modified in place after it was saved (version ",
               data_.version(), ", saved at version ", version_,
               "); clone it before the in-place write");
  return data_;
}

size_t SavedTensor::nbytes() const {
  if (recipe_ != nullptr) {
    return static_cast<size_t>(recipe_->shape.numel()) * dtype_size(recipe_->dtype);
  }
  return data_.defined() ? data_.nbytes() : 0;
}

void SavedTensor::collect_storages(std::unordered_set<const Storage*>& out) const {
  if (recipe_ != nullptr) {
    for (const SavedTensor& s : recipe_->inputs) s.collect_storages(out);
  } else if (data_.defined()) {
    out.insert(data_.impl().storage.get());
  }
}

void set_recipe(const Tensor& t, std::string name, std::vector<SavedTensor> inputs, RecipeFn fn) {
  if (!grad_enabled()) return;
  auto recipe = std::make_shared<Recipe>();
  recipe->name = std::move(name);
  recipe->inputs = std::move(inputs);
  recipe->compute = std::move(fn);
  recipe->shape = t.shape();
  recipe->dtype = t.dtype();
  t.impl().recipe = std::move(recipe);
  t.impl().recipe_version = t.version();
}

std::shared_ptr<const Recipe> recipe_of(const Tensor& t) {
  if (!t.defined() || t.impl().recipe_version != t.version()) return nullptr;
  if (t.impl().recipe != nullptr) return t.impl().recipe;
  return t.impl().recipe_weak.lock();
}

}  // namespace frugal::autograd
