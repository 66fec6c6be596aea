// How much memory a training step will need, before it runs: a dry run of the step on the meta
// device (shapes and byte counts, no data, no GPU), recorded as a trace of its allocations
// (Note [Planned steps]), gives the peak and what it is made of, the planner's arena for it, and
// the largest batch that fits a budget. PyTorch users ask for this (pytorch#48377).
//
//   train::MemoryEstimate e = train::estimate_memory("mobilenet_v2", {.checkpoint = blocks},
//                                                     Shape{128, 224, 224, 3}, DType::f16);
//   e.peak_allocated_bytes;  e.at_peak.saved_activations;  e.phase;  e.module;
//   int64_t b = train::largest_batch(
//       [&](int64_t n) { return train::estimate_memory("mobilenet_v2", {}, {n, 224, 224, 3},
//                                                      DType::f16).peak_allocated_bytes; },
//       int64_t{4} << 30);
//
// Note [What the estimate counts]
//   - The peak of allocated bytes over the last of two steps (optimizer state, made lazily by the
//     first step, exists then), from the state before it: parameters, buffers, the batch, the
//     optimizer state and the gradients the previous step left.
//   - For a CUDA device each request counts rounded up as the caching allocator rounds it (512 B),
//     and the workspace frugal gives cuBLAS (kernels::kCublasWorkspaceBytes, 32 MiB, made by the
//     first product and kept) is live throughout; on the CPU every request counts as asked.
//   - What lives at the peak is split by what it is: parameters; gradients (made in backward and
//     kept after the step); optimizer state; saved activations (made in the forward, released
//     within the step); transients (made in backward or the optimizer step, released within it);
//     kernel workspace; other (the batch, buffers, the loss).
//   - cuDNN's workspace is counted where its call runs: every cuDNN convolution gets exactly a
//     bound known from its shape, and the dry run asks for the same bytes on meta (Note [Bounded
//     conv workspace] in kernels/conv_workspace.h). Other kernels' device workspaces (frugal's
//     depthwise kernels' transposed weights, staging buffers of a few KiB to MiB) are not.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/shape.h"
#include "memory/events.h"
#include "memory/step_trace.h"
#include "models/registry.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "train/model_wrapper.h"

namespace frugal::train {

struct MemoryBreakdown {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t saved_activations = 0;
  int64_t transients = 0;
  int64_t workspace = 0;
  int64_t other = 0;  // the batch, buffers, the loss
  int64_t total() const {
    return parameters + gradients + optimizer_state + saved_activations + transients + workspace +
           other;
  }
};

struct MemoryEstimate {
  int64_t peak_allocated_bytes = 0;
  int64_t before_bytes = 0;  // live when the step starts (parameters, gradients, state, batch)
  MemoryBreakdown at_peak;
  memory::Phase phase = memory::Phase::outside;  // of the step, when the peak falls
  std::string module;                            // running then ("" at the top level)
  size_t arena_bytes = 0;                        // the step planner's arena for this step
  size_t arena_lower_bound = 0;                  // its bound: the largest sum of live planned bytes
};

// Two training steps of `model` (on meta for a prediction, or on the CPU to measure) with `opt`,
// on batches of `input_nhwc`; `for_cuda` counts what a CUDA device adds (Note [What the estimate
// counts]).
// `micro_batches` > 1: the step accumulates gradients over that many slices (train_step).
// `with_arena` false leaves arena_bytes 0: searches over many estimates need only the peak.
MemoryEstimate estimate_memory(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc,
                               int64_t classes, DType precision, bool for_cuda,
                               int64_t micro_batches = 1, bool with_arena = true);

// The same for zoo model `name` built with `config` on meta, trained by "sgd" (momentum 0.9) or
// "adamw", predicted for CUDA (or, with for_cuda false, for the CPU); `wrap`, when given, wraps
// the model as the run does (train/model_wrapper.h).
MemoryEstimate estimate_memory(const std::string& name, const models::ModelConfig& config,
                               const Shape& input_nhwc, DType precision,
                               const std::string& optimizer = "sgd", int64_t micro_batches = 1,
                               bool for_cuda = true, bool with_arena = true,
                               const ModelWrapper& wrap = nullptr);

// The largest multiple of `granularity` (up to `limit`) whose peak(batch) is at most `budget`,
// searched as doubling then bisection (peak grows with the batch); 0 when even `granularity` does
// not fit.
int64_t largest_batch(const std::function<int64_t(int64_t batch)>& peak, int64_t budget,
                      int64_t granularity = 16, int64_t limit = 1 << 16);

std::string breakdown_table(const MemoryEstimate& e);

// The allocations of each of `steps` training steps of `model` (Note [Planned steps]); on the
// meta device, the plans of those steps before any device memory is used. The first steps differ
// from the later ones (optimizer state made lazily, parameters cast to the autocast dtype one
// layer at a time rather than all at once, Note [Lowering a forward's parameters together]).
// On meta, `for_cuda` records the bounded workspace CUDA's convolutions ask for (Note [Bounded
// conv workspace]); off, the trace is the CPU step's.
std::vector<memory::StepTrace> trace_steps(nn::Module& model, optim::Optimizer& opt,
                                           const Shape& input_nhwc, int64_t classes,
                                           DType precision, int steps, int64_t micro_batches = 1,
                                           bool for_cuda = true);
// The last of `steps` steps.
memory::StepTrace trace_step(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc,
                             int64_t classes, DType precision, int steps = 2, bool for_cuda = true);

}  // namespace frugal::train
