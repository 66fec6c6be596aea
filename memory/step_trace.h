// The allocations of one training step, recorded from allocation events, and the plan the caching
// allocator replays in later steps.
//
// Note [Planned steps]
// A training step asks for the same sizes in the same order every time, so after one step the
// whole pattern is known and can be packed into one arena (arena_plan.h) instead of being carved
// from cached segments, whose blocks drift apart and leave reserved memory well above allocated
// (1.41x for a checkpointed MobileNetV2 on the H200 before this):
//   - record: a StepRecorder observes the events of one device; it keeps the allocations made by
//     its own thread, in order, with their category, and pairs each with its release (from any
//     thread);
//   - plan: plan_step keeps the allocations whose category is forward, backward (the step's
//     activations, gradients and transients) or conv_workspace (cuDNN's, the same bytes every
//     step: Note [Bounded conv workspace] in kernels/conv_workspace.h). Those released within the
//     step get an arena offset; so do those the next step releases before it allocates anything
//     plannable (this step's parameter gradients, which the next step's zero_grad frees first
//     thing): Note [Gradients carried into the next step]. The others that outlive the step (the
//     loss) stay in the sequence, to be matched, but are served by the caching allocator, as is
//     everything else: parameters, optimizer state (made lazily in the first step), other kernel
//     workspace (not mirrored on meta), other threads and streams;
//   - replay (CachingAllocator::begin_planned_step): each plannable request of the stepping thread
//     takes the next entry of its size in plan order (so requests of different sizes may
//     interleave differently from the recorded step, a request the plan does not know costs only
//     itself, and so does an entry never requested); a matched arena entry is handed out at its
//     offset unless a live allocation still occupies those bytes. Every request is checked, so a
//     step that departs from its plan is never wrong, only served by the caching allocator where it
//     departs; the replay counts each departure and train::StepPlanner re-plans from that step
//     (one warning);
//   - the first step need not run unplanned: a dry run of the steps on the meta device records the
//     same traces (shapes and byte counts only), so the plans exist before any device memory is
//     used (train::trace_steps; the first steps of a run differ from the later ones, and each
//     gets its own plan).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/device.h"
#include "memory/events.h"

namespace frugal::memory {

constexpr int64_t kStillLive = std::numeric_limits<int64_t>::max();

struct StepTrace {
  struct Allocation {
    size_t bytes = 0;
    Category category = Category::resident;
    int64_t begin = 0;         // index of its allocation among the recorded events
    int64_t end = kStillLive;  // index of its release; kStillLive when it outlived the recording
    Phase phase = Phase::outside;               // of the step, when it was made
    std::shared_ptr<const std::string> module;  // running then; null at the top level
  };
  std::vector<Allocation> allocations;  // in the order they were made
  // Releases of allocations made before the recording (the last step's gradients at zero_grad):
  // (event index, bytes).
  std::vector<std::pair<int64_t, size_t>> earlier_releases;
  int64_t events = 0;       // allocations and releases recorded
  int64_t live_before = 0;  // bytes live on the device when the recording began, as told
};

// The categories a plan places in its arena when they are released within the step.
bool plannable(Category c);

// Observes allocations on `device` made by the constructing thread, from construction to finish().
// `live_before` (the allocator's allocated bytes, say) is kept in the trace for peak sweeps.
class StepRecorder : public AllocationObserver {
 public:
  explicit StepRecorder(Device device, int64_t live_before = 0);
  ~StepRecorder() override;
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  void on_event(const AllocationEvent& e) override;
  StepTrace finish();  // stops observing; later calls return an empty trace

 private:
  Device device_;
  std::thread::id thread_;
  std::mutex mu_;
  bool observing_ = true;
  StepTrace trace_;
  std::unordered_map<uint64_t, size_t> open_;  // event id -> index in trace_.allocations
  std::unordered_set<uint64_t> foreign_;       // made by other threads while recording
};

// Note [Gradients carried into the next step]
// The parameter gradients a step makes live on until the next step's zero_grad, which frees them
// before that step allocates anything else. Outside the arena they sat in cached segments that
// stayed reserved, and empty, through every forward (ResNet-18 f16 reserved 1.05x what it
// allocated, 45 MiB of it the gradients' segments). In the arena they are planned from their
// making to the end of the step, and the bytes they keep into the next step are free again before
// its first planned request: the next step's bytes overlap nothing of theirs. plan_step carries a
// backward allocation that outlives its step (a gradient; the loss, made in the forward, is held
// by the caller past the next step) when the next step's trace releases one of the same rounded
// size before its first plannable allocation (one release per carried allocation). If a carried
// block is still alive when its bytes are planned again (gradients accumulated over several
// steps), the replay serves that request elsewhere (`occupied`), as for any block in the way.
struct StepPlan {
  struct Entry {
    size_t bytes = 0;       // rounded as the caching allocator rounds (round_request)
    size_t offset = 0;      // in the arena, when in_arena
    bool in_arena = false;  // false: outlives the step, served by the caching allocator
    bool carried = false;   // in the arena and outliving the step, freed early in the next one
  };
  std::vector<Entry> entries;  // the trace's plannable allocations, in order
  size_t arena_bytes = 0;
  size_t lower_bound = 0;    // largest sum of live arena entries at one moment
  int64_t carried() const {  // entries carried into the next step
    return std::count_if(entries.begin(), entries.end(), [](const Entry& e) { return e.carried; });
  }
};

// `next`: the trace of the step after (the same step when null, as in steady state); its early
// releases decide which of this step's surviving allocations are carried.
StepPlan plan_step(const StepTrace& trace, const StepTrace* next = nullptr);

// What one replayed step did against its plan (CachingAllocator::end_planned_step).
struct PlanReplay {
  int64_t served = 0;       // requests handed out in the arena
  int64_t extra = 0;        // plannable requests no entry matched (served by the caching allocator)
  int64_t skipped = 0;      // entries passed over, or never requested
  int64_t occupied = 0;     // arena entries whose bytes were still in use
  int64_t live_at_end = 0;  // arena allocations still alive when the step ended, not carried
  int64_t carried_at_end = 0;  // carried arena allocations alive at the end, as planned
  int64_t scratch = 0;         // kernel scratch placed in free arena bytes (Note [Kernel scratch])
  int64_t scratch_elsewhere = 0;  // kernel scratch no free arena bytes held
  bool followed() const { return extra == 0 && skipped == 0 && occupied == 0 && live_at_end == 0; }
};

}  // namespace frugal::memory
