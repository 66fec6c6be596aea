// Callbacks at named points of a training step, registered from C++ on the epoch loop
// (EpochOptions::callbacks) and used by `frugal train` for its memory tools: what people write
// around PyTorch as hooks that log memory_allocated() here and there.
//
//   train::StepCallbacks cb;
//   cb.add(train::StepPoint::after_backward, [](const train::StepInfo& s) {
//     std::printf("step %lld: %lld bytes\n", (long long)s.global_step,
//                 (long long)memory::allocator_for(s.device).stats().allocated_bytes.current);
//   });
//   train::train_epoch(model, opt, nullptr, loader, 0, {.callbacks = &cb});
//
// Note [Step points]
// - step_begin runs just before the step. after_forward (forward and loss), after_backward and
//   after_optimizer run inside it: inside a planned step (train/step_planner.h) too, so a
//   callback there must not allocate device memory (a planned step would count it as a
//   departure from its plan). An out-of-memory error thrown at after_optimizer is not retried by
//   OomRecovery: the step it would repeat has been taken.
//   With micro-batches, after_forward and after_backward run once per slice
//   (StepInfo::micro_batch).
// - step_end and epoch_end are safe points: the step is over, nothing of it is in flight on the
//   host, no planned step or graph capture is open. Releasing cached memory is allowed only here.
// - A step replayed from a CUDA graph (EpochOptions::graph) runs no host code inside it: only
//   step_end and epoch_end fire for it (the inner points fire for the eager steps before it).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/device.h"
#include "core/tensor.h"

namespace frugal::train {

enum class StepPoint : uint8_t {
  step_begin,
  after_forward,
  after_backward,
  after_optimizer,
  step_end,
  epoch_end
};
constexpr int kNumStepPoints = 6;
const char* step_point_name(StepPoint p);

struct StepInfo {
  StepPoint point = StepPoint::step_begin;
  int64_t epoch = 0;
  int64_t step = 0;         // within the epoch, from 0
  int64_t global_step = 0;  // steps finished before this one in the run (across epochs)
  int64_t micro_batch = 0;  // the slice, for after_forward / after_backward
  Device device;
  Tensor loss;  // the step's loss where there is one (not at step_begin or epoch_end)
};
using StepCallback = std::function<void(const StepInfo&)>;

class StepCallbacks {
 public:
  // Several per point run in the order they were added.
  void add(StepPoint point, StepCallback fn);
  // The same function at every point.
  void add_all(const StepCallback& fn);
  bool empty() const;

  // Where the loop is; train_epoch sets it before each step. fire() fills it in.
  void set_position(int64_t epoch, int64_t step, Device device);
  // Calls the point's callbacks; step_end also counts the step as finished.
  void fire(StepPoint point, const Tensor& loss = {}, int64_t micro_batch = 0) const;
  int64_t steps_finished() const { return steps_finished_; }

 private:
  std::array<std::vector<StepCallback>, kNumStepPoints> at_;
  int64_t epoch_ = 0, step_ = 0;
  Device device_;
  mutable int64_t steps_finished_ = 0;
};

}  // namespace frugal::train
