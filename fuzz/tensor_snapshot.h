// The state of a model, optimizer or scaler as bytes, kept to tell whether a rejected file changed
// it (checkpoint_fuzz: a rejected load must leave what it was loaded into bit-identical).
//
//   TensorSnapshot built(model_tensors(model));
//   ... a load that throws ...
//   if (!built.matches(model_tensors(model))) abort();
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nn/module.h"

namespace frugal::fuzz {

// A module's parameters, then its buffers, under their dotted names: what the loaders write.
inline nn::NamedTensors model_tensors(const nn::Module& model) {
  nn::NamedTensors all = model.named_parameters();
  for (auto& b : model.named_buffers()) all.push_back(std::move(b));
  return all;
}

// Every tensor's name, shape, dtype and bytes, in order.
class TensorSnapshot {
 public:
  explicit TensorSnapshot(const nn::NamedTensors& tensors) {
    entries_.reserve(tensors.size());
    for (const auto& [name, t] : tensors) {
      Entry e{name, t.defined(), {}, DType::f32, {}};
      if (t.defined()) {
        Tensor h = on_host(t);
        const auto* bytes = static_cast<const uint8_t*>(h.data_ptr());
        e.shape = h.shape();
        e.dtype = h.dtype();
        e.bytes.assign(bytes, bytes + h.nbytes());
      }
      entries_.push_back(std::move(e));
    }
  }

  // Whether `tensors` have the same names, shapes, dtypes and bytes in the same order. Compared
  // where they lie (a CPU tensor is not copied) and nothing is formatted: this runs after every
  // rejected input, so it is on checkpoint_fuzz's per-input path.
  bool matches(const nn::NamedTensors& tensors) const {
    if (tensors.size() != entries_.size()) return false;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      const auto& [name, t] = tensors[i];
      if (name != e.name || t.defined() != e.defined) return false;
      if (!t.defined()) continue;
      if (t.shape() != e.shape || t.dtype() != e.dtype || t.nbytes() != e.bytes.size()) {
        return false;
      }
      Tensor h = on_host(t);
      if (!e.bytes.empty() && std::memcmp(h.data_ptr(), e.bytes.data(), e.bytes.size()) != 0) {
        return false;
      }
    }
    return true;
  }

 private:
  struct Entry {
    std::string name;
    bool defined;
    Shape shape;
    DType dtype;
    std::vector<uint8_t> bytes;
  };

  static Tensor on_host(const Tensor& t) {
    return t.device().is_cpu() ? t : t.detach().to(Device::cpu());
  }

  std::vector<Entry> entries_;
};

}  // namespace frugal::fuzz
