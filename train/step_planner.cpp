// The step planner's lifecycle: record, plan, replay, re-plan (train/step_planner.h).
#include "train/step_planner.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/factory.h"
#include "memory/allocator.h"
#include "nn/construction_device.h"
#include "optim/optimizer.h"
#include "train/memory_estimate.h"

namespace frugal::train {

namespace {
double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }
}  // namespace

std::string PlannerReport::str() const {
  char line[320];
  if (gave_up) return "step planner: off (its arena did not fit, or steps kept departing)";
  if (arena_bytes == 0 && planned_steps == 0) return "step planner: no plan";
  std::snprintf(line, sizeof line,
                "step planner: arena %.1f MiB, %.3fx its bound (%.1f MiB); %lld of %lld steps "
                "planned, %lld re-plans; last step: %lld served, %lld extra, %lld skipped, %lld "
                "occupied",
                mib(arena_bytes),
                lower_bound > 0 ? static_cast<double>(arena_bytes) / lower_bound : 1.0,
                mib(lower_bound), static_cast<long long>(planned_steps),
                static_cast<long long>(steps), static_cast<long long>(replans),
                static_cast<long long>(last.served), static_cast<long long>(last.extra),
                static_cast<long long>(last.skipped), static_cast<long long>(last.occupied));
  std::string out = line;
  if (last.scratch + last.scratch_elsewhere > 0) {
    std::snprintf(line, sizeof line, "; kernel scratch: %lld in free arena bytes, %lld elsewhere",
                  static_cast<long long>(last.scratch),
                  static_cast<long long>(last.scratch_elsewhere));
    out += line;
  }
  if (trimmed_bytes > 0) {
    std::snprintf(line, sizeof line, "; %.1f MiB of cache given back when it settled",
                  mib(trimmed_bytes));
    out += line;
  }
  if (dropped_after_oom > 0) {
    std::snprintf(line, sizeof line, "; %lld plans dropped after out-of-memory errors",
                  static_cast<long long>(dropped_after_oom));
    out += line;
  }
  return out;
}

StepPlanner::StepPlanner(Device device, PlannerOptions options)
    : allocator_(dynamic_cast<memory::CachingAllocator*>(
          device.is_cuda() ? &memory::allocator_for(device) : nullptr)),
      device_(device),
      options_(options) {}

StepPlanner::StepPlanner(memory::CachingAllocator& allocator, PlannerOptions options)
    : allocator_(&allocator), device_(allocator.device()), options_(options) {}

StepPlanner::~StepPlanner() {
  if (allocator_ != nullptr) allocator_->remove_plan();
}

bool StepPlanner::plan(const memory::StepTrace& trace) {
  return plan(std::vector<memory::StepTrace>{trace});
}

bool StepPlanner::plan(const std::vector<memory::StepTrace>& traces) {
  // A planner that gave up runs its steps on the caching allocator: an arena now would only sit
  // reserved beside them.
  if (allocator_ == nullptr || traces.empty() || report_.gave_up) return false;
  std::vector<memory::StepPlan> plans;
  size_t arena = 0;
  for (size_t i = 0; i < traces.size(); ++i) {
    // Each step's gradients are carried into the next one (Note [Gradients carried into the next
    // step]): the next trace says what that step frees first.
    plans.push_back(memory::plan_step(traces[i], &traces[std::min(i + 1, traces.size() - 1)]));
    arena = std::max(arena, plans.back().arena_bytes);
  }
  plans.front().arena_bytes = arena;  // the later plans then reuse its arena
  memory::StepPlan first = std::move(plans.front());
  plans.erase(plans.begin());
  // Nothing changes until the plans are made (install may still throw on a driver error).
  settled_ = false;
  queued_ = std::move(plans);
  return install(std::move(first));
}

bool StepPlanner::install(memory::StepPlan plan) {
  const size_t arena = plan.arena_bytes, bound = plan.lower_bound;
  carried_ = plan.carried();
  if (!allocator_->install_plan(std::move(plan))) {
    report_.arena_bytes = report_.lower_bound = 0;
    queued_.clear();
    if (allocator_->retired_arena_bytes() > 0 && !retried_install_) {
      // The arena it replaces still holds the last step's gradients, which the next step's
      // zero_grad frees: that step runs on the caching allocator, recorded, and is planned again
      // once. Giving up here kept the run unplanned for good.
      retried_install_ = true;
      settled_ = false;
      std::fprintf(stderr,
                   "frugal: step planner: an arena of %.1f MiB does not fit on %s beside the one "
                   "it replaces, which still holds the last step's gradients; planning again "
                   "after the next step\n",
                   mib(arena), device_.str().c_str());
      return false;
    }
    std::fprintf(stderr,
                 "frugal: step planner: an arena of %.1f MiB does not fit on %s (memory cap or "
                 "device); the caching allocator serves the step\n",
                 mib(arena), device_.str().c_str());
    report_.gave_up = true;  // trying again each step would free and refill the cache each time
    return false;
  }
  retried_install_ = false;
  // The arena in force, which may be larger than this plan asks for (a re-plan that fits keeps
  // the arena it fits in): what the run reserves.
  report_.arena_bytes = allocator_->arena_bytes();
  report_.lower_bound = bound;
  return true;
}

void StepPlanner::run(const std::function<void()>& step) {
  report_.steps++;
  if (allocator_ == nullptr || report_.gave_up) {
    step();
    return;
  }
  std::optional<memory::StepRecorder> recorder;
  if (!settled_) recorder.emplace(device_);
  // The number the step's first allocation will get: segments no later one used are the cache of
  // the steps before the plan settled (Note [Trimming after the plan settles]).
  const int64_t first_allocation = allocator_->stats().allocation.allocated + 1;
  const bool planned = allocator_->has_plan();
  if (planned) allocator_->begin_planned_step();
  try {
    step();
  } catch (const OutOfMemoryError&) {
    if (planned) allocator_->end_planned_step();
    // The step does not fit as planned: whatever comes next (OomRecovery's retry in
    // micro-batches, a smaller batch) runs on the caching allocator with the arena's bytes
    // given back once the failed step's blocks go, and is recorded and planned anew. Kept as it
    // is inside a capture, whose arena is pinned for the graph.
    if (planned && !allocator_->capturing()) drop_plan();
    throw;
  } catch (...) {
    if (planned) allocator_->end_planned_step();
    throw;
  }
  memory::StepTrace trace = recorder ? recorder->finish() : memory::StepTrace{};
  if (planned) {
    report_.planned_steps++;
    report_.last = allocator_->end_planned_step();
    // Blocks the last step left alive (a loss the caller still held) may stand where this step's
    // plan put something: the plan is right all the same.
    const bool kept = report_.last.extra == 0 && report_.last.skipped == 0 &&
                      report_.last.occupied <= stragglers_;
    stragglers_ = report_.last.live_at_end;
    // Inside a CUDA-graph capture nothing may free device memory (a re-plan gives cached segments
    // back) and the arena in force is the graph's: plans change on the next eager step, if any.
    if (allocator_->capturing()) return;
    if (!queued_.empty()) {  // the next step has its own plan, made in advance
      memory::StepPlan next = std::move(queued_.front());
      queued_.erase(queued_.begin());
      install(std::move(next));
      return;
    }
    if (kept && recorder && carried_ == 0 && !trace.earlier_releases.empty()) {
      // A plan made from a first step, which had no gradients before it to free: this step shows
      // which of its own to carry (Note [Gradients carried into the next step]). An improvement,
      // not a departure; the next step is recorded and checked against it.
      memory::StepPlan carrying = memory::plan_step(trace);
      if (carrying.carried() > 0) {
        install(std::move(carrying));
        return;
      }
    }
    if (kept) {
      if (!settled_) trim_unused(first_allocation);
      settled_ = true;
      departures_ = 0;
      return;
    }
    departures_++;
    if (!warned_) {
      warned_ = true;
      std::fprintf(stderr,
                   "frugal: step planner: step %lld departed from its plan (%lld requests served "
                   "elsewhere, %lld entries skipped, %lld occupied, %lld arena blocks alive after "
                   "the step); re-planning from the steps that follow\n",
                   static_cast<long long>(report_.steps),
                   static_cast<long long>(report_.last.extra),
                   static_cast<long long>(report_.last.skipped),
                   static_cast<long long>(report_.last.occupied),
                   static_cast<long long>(report_.last.live_at_end));
    }
    if (!recorder) {  // a settled plan departed: record the next step and plan from it
      settled_ = false;
      return;
    }
    if (departures_ > options_.max_replans) {
      allocator_->remove_plan();
      report_.gave_up = true;
      report_.arena_bytes = report_.lower_bound = 0;
      std::fprintf(stderr,
                   "frugal: step planner: %d steps in a row departed from their plans; the "
                   "caching allocator serves the steps from now on\n",
                   departures_);
      return;
    }
    report_.replans++;
  }
  if (allocator_->capturing()) return;
  install(memory::plan_step(trace));
}

void StepPlanner::drop_plan() {
  allocator_->remove_plan();  // the arena goes when its last block does
  queued_.clear();
  settled_ = false;
  carried_ = 0;
  report_.arena_bytes = report_.lower_bound = 0;
  report_.dropped_after_oom++;
}

// Note [Trimming after the plan settles]
// Until a step follows its plan, the caching allocator serves what the plans do not: the first
// steps' gradients before any plan carried them, the workspace of a step that departed. Those
// segments stay cached, and reserved, though the settled plan never asks for them again. The
// first step that follows its plan gives back every whole free segment that no allocation of that
// step used; segments it used (its parameters' neighbours, a kernel's workspace) stay.
void StepPlanner::trim_unused(int64_t first_allocation) {
  const size_t freed = allocator_->trim_cache(0, first_allocation);
  report_.trimmed_bytes += freed;
}

bool plan_before_first_step(StepPlanner& planner, const std::string& name,
                            const models::ModelConfig& config, const Shape& input_nhwc,
                            DType precision, int64_t micro_batches, const ModelWrapper& wrap) {
  if (!planner.active()) return false;
  // The dry run builds a model and draws dropout masks: the caller's random stream must not
  // notice (a planned run draws what an unplanned one does).
  GeneratorStateGuard keep_random_stream;
  std::shared_ptr<nn::Module> model;
  {
    // Shapes only (Note [Building modules on the meta device]).
    nn::ConstructionDeviceGuard on_meta(Device::meta());
    model = models::create(name, config);
  }
  if (wrap) model = wrap(model);
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  // Three steps: the first two differ from the later ones (lazy optimizer state, and parameters
  // cast to the autocast dtype one layer at a time until the second step has seen the order of
  // every region, checkpointed recomputations included); the third is what every later step does.
  return planner.plan(
      trace_steps(*model, opt, input_nhwc, config.num_classes, precision, 3, micro_batches));
}

}  // namespace frugal::train
