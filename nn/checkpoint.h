// Activation checkpointing, as torch.utils.checkpoint: a segment runs its forward without
// keeping anything for backward but its input, and runs it again inside backward.
//
//   auto block = std::make_shared<nn::Checkpoint>(make_block());   // same parameter names
//   Tensor y = nn::checkpoint_sequential(*features, 4, x);         // four checkpointed segments
//
// Note [Checkpointing]
// - Recomputation replays the forward under the autocast state of the first forward and with
//   the default generator set back to the offset the first forward started from, so dropout and
//   stochastic depth draw the same masks (also inside a captured CUDA graph, whose draws are
//   relative to a device counter that only moves at the end of a replay).
// - BatchNorm updates its running statistics and num_batches_tracked once per step: the replay
//   runs under autograd::recomputing(), which BatchNorm reads. (PyTorch's checkpoint updates them
//   twice, once in the forward and once in the recompute.)
// - The segment's parameters get their gradients from the replay's own backward, which runs
//   inside the outer one; the gradient of the input flows on as usual. Inside the replay the lean
//   saved state (Note [Saved tensors]) applies as anywhere else.
// - Gradients equal those without checkpointing: the replay computes the same values from the
//   same input.
// - So the tensors a segment reads that need gradients must be its input or leaves (parameters):
//   the replay's backward would otherwise run on into the graph that made them, with only the
//   segment's share of their gradient, and free it before the outer backward got there.
//   torch.utils.checkpoint's reentrant form has the same limit. A parameter with history is
//   refused when the segment runs, a tensor with history that fn reads otherwise (one it
//   captured) when backward replays it, before any gradient is accumulated. Parameter copies
//   that autocast cached before the replay are leaves' casts, and allowed.
#pragma once

#include <functional>
#include <memory>

#include "nn/module.h"

namespace frugal::nn {

// Runs fn(x) checkpointed. `params` are the tensors fn reads that need gradients (they keep the
// segment in the graph when x itself needs none); leaves, as Note [Checkpointing] says.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Tensor>& params);

// Wraps a module; forward runs it checkpointed while training with grad enabled, plainly
// otherwise. The wrapped module is registered under an empty name, so parameter and buffer names
// stay those of the module itself ("features.3.conv.0.0.weight"): checkpoints and torchvision
// weights load either way.
class Checkpoint : public Module {
 public:
  explicit Checkpoint(std::shared_ptr<Module> inner);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Checkpoint"; }
  const std::shared_ptr<Module>& inner() const { return inner_; }

 private:
  std::shared_ptr<Module> inner_;
};

// torch.utils.checkpoint.checkpoint_sequential: splits seq's layers into `segments` runs of
// nearly equal length and checkpoints each but the last (whose output backward needs at once).
// The recomputation refers to seq, which must therefore outlive the backward of the output (as
// a model's own features do); nn::Checkpoint holds its module instead, for a wrapper that may go
// before the backward does.
Tensor checkpoint_sequential(const Sequential& seq, int64_t segments, const Tensor& x);

}  // namespace frugal::nn
