// What a model's forward keeps for backward, measured by running the forward (on the meta device:
// shapes and byte counts only, no data) and listing the saved tensors of the graph it records
// (Note [Saved tensors]), per module, beside the one-tensor-per-layer bound (every conv output
// once, in the dtype it was computed in).
//
//   auto model = models::create("mobilenet_v2");
//   model->to(Device::meta());
//   train::SavedEstimate e = train::estimate_saved(*model, {128, 224, 224, 3}, DType::f16);
//   // e.saved_bytes ~ 1.0x e.conv_output_bytes; e.modules[i] per "features.3"
#pragma once

#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/shape.h"
#include "core/autograd.h"
#include "nn/module.h"

namespace frugal::train {

struct SavedEstimate {
  size_t saved_bytes = 0;                      // all storages the graph keeps, each once
  size_t conv_output_bytes = 0;                // the one-tensor-per-layer bound
  std::vector<autograd::ModuleSaved> modules;  // in forward order
};

// Runs model's forward in training mode on an input of `input_nhwc` (f32, on the device of the
// model's parameters) under autocast to `precision` when it is f16/bf16, and sizes what the
// recorded graph keeps. Rows group module paths by their first `depth` components.
SavedEstimate estimate_saved(nn::Module& model, const Shape& input_nhwc, DType precision,
                             int depth = 2);

// A fixed-width table of the estimate (MiB), one row per module and a total.
std::string saved_table(const SavedEstimate& e);

}  // namespace frugal::train
