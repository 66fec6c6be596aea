// The model and optimizer settings that checkpoint_fuzz loads into and checkpoint_seed saves from
// (tensor_snapshot.h keeps their state, to tell whether a rejected file changed it).
#pragma once

#include <memory>
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

}  // namespace frugal::fuzz
