// Recording a step's allocations and turning them into a plan (Note [Planned steps]).
#include "memory/step_trace.h"

#include <algorithm>
#include <map>

#include "memory/arena_plan.h"
#include "memory/rounding.h"

namespace frugal::memory {

bool plannable(Category c) {
  return c == Category::forward || c == Category::backward || c == Category::conv_workspace;
}

StepRecorder::StepRecorder(Device device, int64_t live_before)
    : device_(device), thread_(std::this_thread::get_id()) {
  trace_.live_before = live_before;
  add_allocation_observer(this);
}

StepRecorder::~StepRecorder() { finish(); }

void StepRecorder::on_event(const AllocationEvent& e) {
  if (e.device != device_ || (!e.is_alloc() && !e.is_free())) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!observing_) return;
  if (e.is_alloc()) {
    if (std::this_thread::get_id() != thread_) {
      foreign_.insert(e.id);
      return;
    }
    open_.emplace(e.id, trace_.allocations.size());
    trace_.allocations.push_back({e.bytes, e.category(), trace_.events++, kStillLive,
                                  current_phase(), current_module_path()});
    return;
  }
  auto it = open_.find(e.id);
  if (it == open_.end()) {
    if (foreign_.erase(e.id) == 0) {  // made before the recording
      trace_.earlier_releases.emplace_back(trace_.events++, e.bytes);
    }
    return;
  }
  trace_.allocations[it->second].end = trace_.events++;
  open_.erase(it);
}

StepTrace StepRecorder::finish() {
  bool was_observing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    was_observing = observing_;
    observing_ = false;
  }
  if (!was_observing) return {};
  remove_allocation_observer(this);
  std::lock_guard<std::mutex> lock(mu_);
  open_.clear();
  foreign_.clear();
  return std::move(trace_);
}

namespace {

// Rounded sizes of the releases, from before the recording, that `next` makes before its first
// plannable allocation, with their counts (Note [Gradients carried into the next step]).
std::map<size_t, int64_t> released_first(const StepTrace& next) {
  int64_t first = next.events;
  for (const StepTrace::Allocation& a : next.allocations) {
    if (plannable(a.category)) {
      first = a.begin;
      break;
    }
  }
  std::map<size_t, int64_t> sizes;
  for (const auto& [event, bytes] : next.earlier_releases) {
    if (event < first) sizes[round_request(bytes)]++;
  }
  return sizes;
}

}  // namespace

StepPlan plan_step(const StepTrace& trace, const StepTrace* next) {
  StepPlan plan;
  std::map<size_t, int64_t> carry = released_first(next != nullptr ? *next : trace);
  std::vector<Lifetime> lifetimes;
  std::vector<size_t> arena_entry;  // entry index of each lifetime
  for (const StepTrace::Allocation& a : trace.allocations) {
    if (!plannable(a.category)) continue;
    StepPlan::Entry e;
    e.bytes = round_request(a.bytes);
    int64_t end = a.end;
    if (end == kStillLive && a.category == Category::backward) {  // a gradient, not the loss
      auto it = carry.find(e.bytes);
      if (it != carry.end() && it->second > 0) {
        it->second--;
        e.carried = true;
        end = trace.events;  // to the end of the step; the next frees it before its first request
      }
    }
    e.in_arena = end != kStillLive;
    if (e.in_arena) {
      arena_entry.push_back(plan.entries.size());
      lifetimes.push_back({a.bytes, a.begin, end});
    }
    plan.entries.push_back(e);
  }
  // Time counted in the planned allocations' own events only: a device trace has kernel scratch
  // and other unplanned events between them that a dry run on meta does not, and the packing
  // (whose area order weighs lifetimes by their length) must not depend on them.
  lifetimes = on_dense_clock(std::move(lifetimes));
  const ArenaPlan arena = plan_arena(lifetimes);
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    plan.entries[arena_entry[i]].offset = arena.offsets[i];
  }
  plan.arena_bytes = arena.arena_bytes;
  plan.lower_bound = arena.lower_bound;
  return plan;
}

}  // namespace frugal::memory
