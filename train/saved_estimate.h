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
#include "memory/events.h"
#include "memory/step_trace.h"
#include "nn/module.h"
#include "optim/optimizer.h"

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

// The peak of a whole training step (forward, loss, backward, optimizer), measured from the
// allocation events of its last step (memory::PeakTracker, Note [Allocation events]): run on the
// meta device it is a dry run, no data and no GPU. `steps` >= 2 so that optimizer state, made
// lazily by the first step, is resident in the step measured, as in every later step. What is
// not predicted yet on meta: kernel workspace (on meta no kernel runs), and for a CUDA device
// the caching allocator's rounding.
struct StepMemory {
  int64_t before_bytes = 0;  // allocated when the step starts
  memory::PeakTracker::Moment peak;
};
StepMemory estimate_step_memory(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc,
                                int64_t classes, DType precision, int steps = 2);
std::string step_table(const StepMemory& m);

// The allocations of the last of `steps` training steps, in order (Note [Planned steps]): on the
// meta device the plan of a step before any device memory is used (train::StepPlanner::plan).
memory::StepTrace trace_step(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc,
                             int64_t classes, DType precision, int steps = 2);
// The allocations of each of `steps` steps: the first step differs from later ones (optimizer
// state made lazily, parameters cast to the autocast dtype one layer at a time rather than all at
// once, Note [Lowering a forward's parameters together]).
std::vector<memory::StepTrace> trace_steps(nn::Module& model, optim::Optimizer& opt,
                                           const Shape& input_nhwc, int64_t classes,
                                           DType precision, int steps);

}  // namespace frugal::train
