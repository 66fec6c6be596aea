// Reading and writing optimizer state as named tensors, all-or-nothing: a StateReader looks up
// and checks every entry first; the optimizer assigns only after check_all_used() passed.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "optim/optimizer.h"

namespace frugal::optim {

std::string state_name(size_t index, const char* what);  // "state.3.exp_avg"
Tensor scalar_tensor(double v);                          // f64 scalar on the CPU

class StateReader {
 public:
  StateReader(std::string optimizer, const NamedTensors& state, const std::vector<Tensor>& params);
  double scalar(const std::string& name);
  std::optional<double> optional_scalar(const std::string& name);
  // The per-parameter tensor `what` of parameter i, checked against its shape; undefined if absent.
  Tensor optional_like(size_t i, const char* what);
  // Throws naming the first entry that no lookup consumed (an extra or misspelt tensor) or that
  // appears twice (a lookup reads the first; the second would be dropped unseen).
  void check_all_used() const;

 private:
  const Tensor* find(const std::string& name);
  std::string optimizer_;
  const NamedTensors& state_;
  const std::vector<Tensor>& params_;
  std::set<std::string> used_;
};

}  // namespace frugal::optim
