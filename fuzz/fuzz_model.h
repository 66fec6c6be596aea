// The model, optimizer and scaler that checkpoint_fuzz loads into and checkpoint_seed saves
// from, and a byte snapshot of all three (a rejected file must leave them bit-identical).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "nn/layers.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace frugal::fuzz {

// A conv weight (4-D, so the OIHW conversion runs), BatchNorm buffers (an i64 count among them)
// and a linear layer: every kind of tensor a checkpoint holds, in a few hundred bytes.
inline std::shared_ptr<nn::Sequential> tiny_model() {
  manual_seed(1);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3), std::make_shared<nn::BatchNorm2d>(3),
      std::make_shared<nn::Linear>(3, 2)});
}

constexpr optim::SgdOptions kSgd = {.lr = 0.1, .momentum = 0.9};

// Every tensor's name, shape, dtype and bytes.
inline std::vector<std::string> snapshot(const nn::NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) {
    Tensor h = t.detach().to(Device::cpu());
    out.push_back(name + " " + h.shape().str() + " " + dtype_name(h.dtype()) + " " +
                  std::string(static_cast<const char*>(h.data_ptr()), h.nbytes()));
  }
  return out;
}

inline std::vector<std::string> snapshot(const nn::Module& model) {
  nn::NamedTensors all = model.named_parameters();
  for (auto& b : model.named_buffers()) all.push_back(b);
  return snapshot(all);
}

}  // namespace frugal::fuzz
