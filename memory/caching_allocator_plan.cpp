// The caching allocator's planned steps: the arena, matching requests against the plan, and what
// a replay reports (Note [Planned steps] in memory/step_trace.h).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "base/error.h"
#include "memory/caching_allocator.h"

namespace frugal::memory {

bool CachingAllocator::Arena::occupied(uintptr_t a, size_t size) const {
  auto it = live.lower_bound(a);
  if (it != live.end() && it->first < a + size) return true;
  if (it == live.begin()) return false;
  --it;
  return it->first + it->second.size > a;
}

bool CachingAllocator::install_plan(StepPlan plan) {
  std::lock_guard<std::mutex> lock(mu_);
  FRUGAL_CHECK(!planned_step_, "install_plan(", device_.str(), "): a planned step is running");
  has_plan_ = false;
  // A re-plan that fits the arena in force keeps it: its blocks still alive (a departed step's
  // gradients, freed by the next zero_grad) are never handed out twice, since every planned
  // request is checked against the live blocks, and two arenas are never reserved at once.
  // One much larger than needed is given back when it is empty. (Reserving a smaller arena
  // beside one that still holds blocks can take room a capped step needs: shrinking needs the
  // swap deferred until the old arena empties.)
  const bool reuse =
      arena_ != nullptr && plan.arena_bytes <= arena_->bytes &&
      (!arena_->live.empty() || arena_->pins > 0 || plan.arena_bytes >= arena_->bytes / 10 * 9);
  if (!reuse) retire_arena();
  // The plan replaces the cached blocks the step used to take from: give them back first.
  release_free_segments();
  if (!reuse) {
    auto arena = std::make_unique<Arena>();
    arena->bytes = plan.arena_bytes;
    if (arena->bytes > 0) {
      void* ptr = reserve_segment(arena->bytes);  // may throw on a driver error: no plan then
      if (ptr == nullptr) return false;
      arena->base = reinterpret_cast<uintptr_t>(ptr);
    }
    arena_ = std::move(arena);
  }
  plan_ = std::move(plan);
  by_size_.clear();
  for (size_t i = 0; i < plan_.entries.size(); ++i) {
    by_size_[plan_.entries[i].bytes].entries.push_back(i);
  }
  has_plan_ = true;
  return true;
}

void CachingAllocator::remove_plan() {
  std::lock_guard<std::mutex> lock(mu_);
  FRUGAL_CHECK(!planned_step_, "remove_plan(", device_.str(), "): a planned step is running");
  retire_arena();
  has_plan_ = false;
  plan_ = {};
}

bool CachingAllocator::has_plan() const {
  std::lock_guard<std::mutex> lock(mu_);
  return has_plan_;
}

size_t CachingAllocator::arena_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return has_plan_ && arena_ != nullptr ? arena_->bytes : 0;
}

size_t CachingAllocator::retired_arena_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t bytes = 0;
  for (const auto& arena : retired_) bytes += arena->bytes;
  return bytes;
}

// The current arena goes now when nothing lives in it, else it waits among the retired ones
// until its last block is released.
void CachingAllocator::retire_arena() {
  if (arena_ == nullptr) return;
  if (arena_->live.empty() && arena_->pins == 0) {
    free_arena(std::move(arena_));
  } else {
    retired_.push_back(std::move(arena_));
  }
}

void CachingAllocator::free_arena(std::unique_ptr<Arena> arena) {
  if (arena->bytes > 0) return_segment(reinterpret_cast<void*>(arena->base), arena->bytes);
}

void CachingAllocator::begin_planned_step() {
  std::lock_guard<std::mutex> lock(mu_);
  FRUGAL_CHECK(has_plan_, "begin_planned_step(", device_.str(), "): no plan installed");
  FRUGAL_CHECK(!planned_step_, "begin_planned_step(", device_.str(), "): a planned step is ",
               "already running");
  planned_step_ = true;
  step_thread_ = std::this_thread::get_id();
  for (auto& [bytes, queue] : by_size_) queue.next = 0;
  cursor_ = 0;
  replay_ = {};
}

PlanReplay CachingAllocator::end_planned_step() {
  std::lock_guard<std::mutex> lock(mu_);
  FRUGAL_CHECK(planned_step_, "end_planned_step(", device_.str(), "): no planned step is running");
  planned_step_ = false;
  for (const auto& [bytes, queue] : by_size_) {
    replay_.skipped += static_cast<int64_t>(queue.entries.size() - queue.next);
  }
  if (arena_ != nullptr) {
    for (const auto& [addr, live] : arena_->live) {
      (live.carried ? replay_.carried_at_end : replay_.live_at_end)++;
    }
  }
  return replay_;
}

void* CachingAllocator::take_planned(size_t rounded, size_t requested) {
  // The next entry of this size, in plan order: sizes repeat in the same order step after step
  // even where requests of different sizes interleave differently (the first step casts each
  // parameter when its layer runs, later ones all at the start of the forward).
  auto it = by_size_.find(rounded);
  if (it == by_size_.end() || it->second.next == it->second.entries.size()) {
    replay_.extra++;
    return nullptr;
  }
  const size_t index = it->second.entries[it->second.next++];
  cursor_ = std::max(cursor_, index + 1);
  const StepPlan::Entry& e = plan_.entries[index];
  if (!e.in_arena) return nullptr;  // planned to outlive the step
  const uintptr_t addr = arena_->base + e.offset;
  if (arena_->occupied(addr, rounded)) {
    replay_.occupied++;
    return nullptr;
  }
  replay_.served++;
  return hand_out_in_arena(addr, rounded, requested, e.carried);
}

void* CachingAllocator::take_scratch(size_t rounded, size_t requested) {
  if (arena_ == nullptr) return nullptr;
  // Clear of the blocks alive now and of the next few entries the plan hands out (Note [Kernel
  // scratch]); where that leaves no room (near the step's peak), of the very next one alone.
  for (size_t lookahead : {kScratchLookahead, size_t{1}}) {
    if (void* p = take_scratch_clear_of(rounded, requested, lookahead)) return p;
  }
  replay_.scratch_elsewhere++;
  return nullptr;
}

void* CachingAllocator::take_scratch_clear_of(size_t rounded, size_t requested, size_t lookahead) {
  std::vector<std::pair<uintptr_t, uintptr_t>> upcoming;  // [begin, end)
  for (size_t i = cursor_; i < plan_.entries.size() && upcoming.size() < lookahead; ++i) {
    const StepPlan::Entry& e = plan_.entries[i];
    if (e.in_arena)
      upcoming.emplace_back(arena_->base + e.offset, arena_->base + e.offset + e.bytes);
  }
  // The first place in [from, run_end) clear of the upcoming entries, or run_end.
  auto clear_place = [&](uintptr_t from, uintptr_t run_end) {
    for (size_t moves = 0; moves <= upcoming.size(); ++moves) {
      bool moved = false;
      for (const auto& [b, e] : upcoming) {
        if (from < e && b < from + rounded) {
          from = e;
          moved = true;
        }
      }
      if (!moved || from + rounded > run_end) break;
    }
    return from + rounded <= run_end ? from : run_end;
  };
  // The smallest run of free bytes that holds it, between the blocks alive now.
  uintptr_t best = 0, at = arena_->base;
  size_t best_run = SIZE_MAX;
  auto consider = [&](uintptr_t run_end) {
    const size_t run = run_end - at;
    if (run < rounded || run >= best_run) return;
    const uintptr_t place = clear_place(at, run_end);
    if (place == run_end) return;
    best_run = run;
    best = place;
  };
  for (const auto& [addr, live] : arena_->live) {
    if (addr > at) consider(addr);
    at = std::max(at, addr + live.size);
  }
  if (arena_->base + arena_->bytes > at) consider(arena_->base + arena_->bytes);
  if (best_run == SIZE_MAX) return nullptr;
  replay_.scratch++;
  return hand_out_in_arena(best, rounded, requested, /*carried=*/false);
}

void* CachingAllocator::hand_out_in_arena(uintptr_t addr, size_t rounded, size_t requested,
                                          bool carried) {
  arena_->live.emplace(addr, Arena::Live{rounded, requested, carried});
  const auto n = static_cast<int64_t>(rounded);
  stats_.allocated_bytes.add(n);
  stats_.active_bytes.add(n);
  stats_.requested_bytes.add(static_cast<int64_t>(requested));
  stats_.allocation.add(1);
  return reinterpret_cast<void*>(addr);
}

CachingAllocator::Arena* CachingAllocator::arena_holding(uintptr_t addr) {
  if (arena_ != nullptr && arena_->contains(addr)) return arena_.get();
  for (auto& a : retired_) {
    if (a->contains(addr)) return a.get();
  }
  return nullptr;
}

bool CachingAllocator::release_planned(uintptr_t addr) {
  Arena* arena = arena_holding(addr);
  if (arena == nullptr) return false;
  auto it = arena->live.find(addr);
  if (it == arena->live.end()) {
    std::fprintf(stderr,
                 "frugal: %s caching allocator: release of %p, inside the arena but not "
                 "a live block\n",
                 device_.str().c_str(), reinterpret_cast<void*>(addr));
    return true;
  }
  const auto n = static_cast<int64_t>(it->second.size);
  stats_.allocated_bytes.sub(n);
  stats_.active_bytes.sub(n);
  stats_.requested_bytes.sub(static_cast<int64_t>(it->second.requested));
  stats_.allocation.sub(1);
  arena->live.erase(it);
  free_if_retired_and_unused(arena);
  return true;
}

void CachingAllocator::free_if_retired_and_unused(Arena* arena) {
  if (arena == arena_.get() || !arena->live.empty() || arena->pins > 0) return;
  auto r = std::find_if(retired_.begin(), retired_.end(),
                        [&](const std::unique_ptr<Arena>& a) { return a.get() == arena; });
  if (r == retired_.end()) return;
  std::unique_ptr<Arena> gone = std::move(*r);
  retired_.erase(r);
  // Called from release(), which cannot throw (a DataPtr's destructor), and from unpin_arena
  // (a captured step's destructor): a failed free (a sticky CUDA error) is reported, as the
  // allocator's destructor reports it, instead of ending the process in std::terminate.
  try {
    free_arena(std::move(gone));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal: freeing a retired arena of %s failed: %s\n",
                 device_.str().c_str(), e.what());
  }
}

uintptr_t CachingAllocator::pin_arena() {
  std::lock_guard<std::mutex> lock(mu_);
  if (arena_ == nullptr || arena_->bytes == 0) return 0;
  arena_->pins++;
  return arena_->base;
}

void CachingAllocator::unpin_arena(uintptr_t handle) {
  if (handle == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Arena* arena = arena_holding(handle);
  FRUGAL_CHECK(arena != nullptr && arena->pins > 0, "unpin_arena(", device_.str(),
               "): no pinned arena at ", handle);
  arena->pins--;
  free_if_retired_and_unused(arena);
}

}  // namespace frugal::memory
