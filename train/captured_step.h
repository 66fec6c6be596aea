// A training step captured once as a CUDA graph and replayed: the host launches the whole step
// with one call instead of some 700 kernel launches, which is what bounds small-input steps
// (MobileNetV2 at 32x32 spends more host than device time eagerly). PyTorch users know this as
// torch.cuda.CUDAGraph / torch.cuda.make_graphed_callables with static inputs.
//
//   Tensor images = Tensor::empty({256, 32, 32, 1}, {.device = dev}), labels = ...;  // static
//   train::CapturedStep step(dev, [&] {
//     return train::train_step(model, opt, images, labels, DType::f16, scaler.get());
//   });
//   for (auto& batch : batches) {
//     copy_(images, batch.images);  // new data goes into the static inputs
//     copy_(labels, batch.labels);
//     Tensor loss = step();          // eager for the warm-up calls, then captured and replayed
//   }
//
// Note [Captured training steps]
//   - The first `warmup` calls run the step eagerly: optimizer state, cuDNN algorithm choices
//     and library workspaces come into being there, outside the graph.
//   - The next call captures the step on the device's compute stream (nothing runs while
//     capturing) and replays it once; every later call replays it. Each call's return value is
//     the captured step's output tensor, rewritten by every replay.
//   - Memory: the capture allocates from a private pool of the caching allocator (Note [Private
//     pools for captured graphs]), which the graph keeps until this object is destroyed. The
//     pool borrows the free bytes the eager steps left cached before it maps segments of its
//     own, and the cached segments it left whole are given back after the capture.
//     Temporaries count as freed after capture, so the allocator's allocated bytes understate
//     what a replay uses; its reserved bytes do not.
//   - With a step planner (CapturedStepOptions::planner), every call runs the step through it:
//     the warm-up goes on past `warmup` until the planner has settled (at most
//     kMaxSettlingCalls more), and the capture is itself a planned step, so its activations,
//     gradients and kernel scratch sit in the planner's arena at their planned offsets, which
//     the arena keeps for the graph (Note [Captured steps in the arena] in
//     memory/caching_allocator.h); only the rest (the loss, the optimizer's transients) goes to
//     the private pool. A replayed step then reserves what an eager planned one does, not a
//     second copy of the step's memory.
//   - Randomness: dropout on `generator` reads its offset from a device counter that every
//     replay advances (Note [Random draws in captured graphs]), so each replay draws new masks,
//     the same ones the eager steps would have drawn. Other random ops cannot be captured.
//   - State lives on the device: parameters, gradients, momentum, BatchNorm statistics and
//     counts, the GradScaler's scale and found-inf flag are all updated in place by the replays.
//     What the step reads from the host at capture time is frozen: the inputs' addresses and
//     the optimizer's hyper-parameters, unless the optimizer keeps its learning rate on the
//     device (Note [Learning rate on the device] in optim/optimizer.h; train_epoch does).
//   - A step that synchronises with the host (item(), to_vector()) cannot be captured: capture
//     fails with an error naming the call, and nothing has run, so weights and optimizer state
//     are as they were.
//   - Where graphs are not available (CPU, meta, a build without CUDA) every call runs the
//     step eagerly, so the same loop runs everywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/factory.h"
#include "core/tensor.h"

namespace frugal::kernels {
class DeviceGraph;
}

namespace frugal::train {

class StepPlanner;

struct CapturedStepOptions {
  int64_t warmup = 2;              // eager calls before the capture (at least 1)
  Generator* generator = nullptr;  // the dropout generator; default_generator() when null
  StepPlanner* planner = nullptr;  // runs every call, the capture into its arena (see above)
};

class CapturedStep {
 public:
  using StepFn = std::function<Tensor()>;
  CapturedStep(Device device, StepFn step, CapturedStepOptions options = {});
  ~CapturedStep();  // waits for the replays, then hands the graph's memory back
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  Tensor operator()();  // one step, see Note [Captured training steps]

  static constexpr int64_t kMaxSettlingCalls = 8;  // eager calls past warmup, for the planner

  bool captured() const { return graph_ != nullptr; }
  // The next call runs the step eagerly (a warm-up, a settling planner, no graphs here): host
  // code inside the step, such as step callbacks, runs then, and not in a capture or replay.
  bool next_call_is_eager() const;
  int64_t replays() const { return replays_; }
  int64_t graph_nodes() const;  // 0 until captured

 private:
  void capture();
  void replay();
  Tensor run_eager();

  Device device_;
  StepFn step_;
  CapturedStepOptions options_;
  Generator* gen_;
  bool can_capture_;
  int64_t calls_ = 0;
  int64_t replays_ = 0;
  uint64_t draws_per_step_ = 0;
  uint64_t pool_ = 0;
  uintptr_t pinned_arena_ = 0;  // the planner's arena, kept for the graph
  Tensor rng_counter_;          // i64 [1] on the device: the dropout offset base of the next replay
  Tensor out_;
  std::unique_ptr<kernels::DeviceGraph> graph_;
};

}  // namespace frugal::train
