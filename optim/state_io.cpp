// Named-tensor optimizer state: lookups with checks that name the offending entry.
#include "optim/state_io.h"

#include "core/factory.h"

namespace frugal::optim {

std::string state_name(size_t index, const char* what) {
  return "state." + std::to_string(index) + "." + what;
}

Tensor scalar_tensor(double v) { return full(Shape{}, v, {.dtype = DType::f64}); }

StateReader::StateReader(std::string optimizer, const NamedTensors& state,
                         const std::vector<Tensor>& params)
    : optimizer_(std::move(optimizer)), state_(state), params_(params) {}

const Tensor* StateReader::find(const std::string& name) {
  for (const auto& [n, t] : state_) {
    if (n == name) {
      used_.insert(name);
      return &t;
    }
  }
  return nullptr;
}

double StateReader::scalar(const std::string& name) {
  std::optional<double> v = optional_scalar(name);
  FRUGAL_CHECK(v.has_value(), optimizer_, " state: missing entry '", name, "'");
  return *v;
}

std::optional<double> StateReader::optional_scalar(const std::string& name) {
  const Tensor* t = find(name);
  if (t == nullptr) return std::nullopt;
  FRUGAL_CHECK(t->numel() == 1, optimizer_, " state: entry '", name, "' is ", describe(*t),
               ", expected a scalar");
  return t->item();
}

Tensor StateReader::optional_like(size_t i, const char* what) {
  std::string name = state_name(i, what);
  const Tensor* t = find(name);
  if (t == nullptr) return {};
  FRUGAL_CHECK(t->shape() == params_[i].shape() && t->dtype() == DType::f32, optimizer_,
               " state: entry '", name, "' is ", describe(*t), ", expected ", params_[i].shape(),
               " f32 like its parameter");
  return *t;
}

void StateReader::check_all_used() const {
  std::set<std::string> seen;
  for (const auto& [n, t] : state_) {
    FRUGAL_CHECK(seen.insert(n).second, optimizer_, " state: entry '", n, "' appears twice");
    FRUGAL_CHECK(used_.count(n) != 0, optimizer_, " state: unexpected entry '", n, "' ",
                 describe(t), " (", params_.size(), " parameters)");
  }
}

}  // namespace frugal::optim
