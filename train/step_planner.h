// The step planner (Note [Planned steps] in memory/step_trace.h): runs training steps so that
// their activations, gradients and transients live in one arena packed for the step, instead of
// in cached segments that drift apart. Reserved memory then stays at the arena plus what lives
// outside it (parameters, optimizer state, the batch), close to allocated.
//
//   train::StepPlanner planner(device);
//   planner.plan(train::trace_steps(*meta_model, meta_opt, {128, 224, 224, 3}, 1000, DType::f16,
//   2)); for (...) planner.run([&] { loss = train::train_step(*model, opt, images, labels, ...);
//   }); planner.report();  // arena bytes against the bound, re-plans, the last replay
//
// Lifecycle: without a plan, a step runs on the caching allocator and is recorded; a plan is made
// from it and installed. A planned step is recorded too until one follows its plan exactly; a
// planned step that departs from its plan is correct anyway (every request is checked) and the
// planner re-plans from it, with one warning on stderr, at most max_replans times in a row before
// it gives the step back to the caching allocator. A step of another shape (a last partial batch)
// is a departure: run it outside the planner (train_epoch does), or it costs a re-plan.
// On devices without a caching allocator (the CPU, meta) run() just runs the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "base/device.h"
#include "memory/caching_allocator.h"
#include "memory/step_trace.h"
#include "models/registry.h"
#include "train/model_wrapper.h"

namespace frugal::train {

struct PlannerOptions {
  int max_replans = 3;  // consecutive departures before giving up
};

struct PlannerReport {
  int64_t steps = 0;          // run through the planner
  int64_t planned_steps = 0;  // of which ran with a plan in force
  int64_t replans = 0;        // plans made after the first
  size_t arena_bytes = 0;     // of the arena in force (what the run reserves); 0 without one
  size_t lower_bound = 0;     // its largest sum of live arena bytes
  bool gave_up = false;
  size_t trimmed_bytes = 0;       // cached segments given back once the plan settled
  int64_t dropped_after_oom = 0;  // plans dropped by steps that ran out of memory (see run)
  memory::PlanReplay last;        // the last planned step's replay
  std::string str() const;        // one line for people
};

class StepPlanner {
 public:
  // The caching allocator of `device` when it has one (CUDA); otherwise run() only runs steps.
  explicit StepPlanner(Device device, PlannerOptions options = {});
  explicit StepPlanner(memory::CachingAllocator& allocator, PlannerOptions options = {});
  ~StepPlanner();  // removes its plan (an arena still in use stays until its blocks go)
  StepPlanner(const StepPlanner&) = delete;
  StepPlanner& operator=(const StepPlanner&) = delete;

  // Installs a plan made from `trace` (a dry run on meta, train::trace_step) so that the next
  // step already runs in the arena. False when the arena does not fit under the allocator's cap.
  bool plan(const memory::StepTrace& trace);
  // One plan per coming step, the last for every step after (train::trace_steps: the first step
  // of a training run asks for its memory in another order than the later ones). One arena, as
  // large as the largest of them, serves them all.
  bool plan(const std::vector<memory::StepTrace>& traces);
  // Runs one step under the planner (see the lifecycle above). Exceptions from `step` pass
  // through; the planned step is closed first. A planned step that runs out of memory drops its
  // plan (outside a graph capture): the arena goes once the failed step's blocks do, and the next
  // step is recorded and planned anew, so a retry in micro-batches has the arena's bytes.
  void run(const std::function<void()>& step);
  const PlannerReport& report() const { return report_; }
  bool active() const { return allocator_ != nullptr; }
  // Still making plans: a plan is queued or no planned step has followed its plan yet (and the
  // planner has not given up). A CUDA-graph capture waits for the steps to repeat the plan.
  bool settling() const { return active() && !report_.gave_up && !(settled_ && queued_.empty()); }

 private:
  bool install(memory::StepPlan plan);
  void drop_plan();  // after an out-of-memory error: see run
  void trim_unused(int64_t first_allocation);

  memory::CachingAllocator* allocator_ = nullptr;
  Device device_;
  PlannerOptions options_;
  PlannerReport report_;
  std::vector<memory::StepPlan> queued_;  // plans for the coming steps, in order
  bool settled_ = false;                  // a planned step followed the plan: stop recording
  int departures_ = 0;                    // consecutive
  int64_t stragglers_ = 0;                // arena blocks the last planned step left alive
  int64_t carried_ = 0;                   // entries of the plan in force carried to the next step
  bool warned_ = false;
  bool retried_install_ = false;  // an arena that did not fit beside its predecessor, once
};

// Plans the training step of zoo model `name` (built with `config`, trained with any optimizer: its
// state is not planned) on batches of `input_nhwc` under `precision`, from a dry run on meta, so
// the first step already runs in the arena. False when the planner is not active or the arena does
// not fit. `wrap`, when given, wraps the dry run's model as the real one is wrapped (data
// parallelism over a dist::MetaGroup), so that the plan covers what the wrapper allocates.
bool plan_before_first_step(StepPlanner& planner, const std::string& name,
                            const models::ModelConfig& config, const Shape& input_nhwc,
                            DType precision, int64_t micro_batches = 1,
                            const ModelWrapper& wrap = nullptr);

}  // namespace frugal::train
