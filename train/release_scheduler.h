// When to give cached device memory back: what people do around PyTorch with an empty_cache()
// at each epoch's end or when usage nears a threshold, built in and confined to safe points.
//
//   train::StepCallbacks cb;
//   train::ReleaseScheduler release(memory::allocator_for(device),
//                                   train::ReleasePolicy::parse("threshold:0.85"));
//   release.attach(cb);   // then train_epoch(..., {.callbacks = &cb})
//
// Note [Releasing cached memory]
// - Only at safe points (Note [Step points]): step_end and epoch_end, never while a phase of a
//   step is open on the calling thread or a graph is being captured, so nothing the step still
//   uses is given back and no step ever waits for a cudaFree. A captured graph's pool is kept by
//   the allocator itself (CachingAllocator::trim_cache).
// - epoch: everything cached, at each epoch's end.
// - threshold:F: everything cached, at a step's end when reserved passes F of the capacity (the
//   allocator's cap, else the device's total), then not again for cooldown_steps steps.
// - adaptive: keeps reserved near what the steps need. It learns each step's peak of allocated
//   bytes; once it has seen window_steps steps, at each step's end with reserved above the
//   largest peak of the last window_steps steps plus margin, it gives back cached segments that
//   none of those steps used (largest first, until reserved is within the target): a segment a
//   recent step needed stays, so the next step finds it cached and never grows mid-step, and
//   what they did not need (a larger first step's, an evaluation's, a partial batch's) goes back
//   to the device for others.
// Each release is logged with its bytes.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "memory/allocator.h"
#include "memory/events.h"
#include "train/step_callbacks.h"

namespace frugal::train {

struct ReleasePolicy {
  enum class Kind { off, epoch, threshold, adaptive };
  Kind kind = Kind::off;
  double fraction = 0.85;       // threshold
  int64_t cooldown_steps = 50;  // threshold
  int64_t window_steps = 20;    // adaptive
  double margin = 0.10;         // adaptive
  // "off", "epoch", "threshold" or "threshold:F" (0 < F <= 1), "adaptive".
  static ReleasePolicy parse(const std::string& text);
  std::string str() const;
};

struct ReleaseRecord {
  int64_t global_step = 0;
  StepPoint point = StepPoint::step_end;
  int64_t bytes = 0;  // given back
  int64_t reserved_before = 0, reserved_after = 0;
  std::string reason;
};

class ReleaseScheduler {
 public:
  // `capacity`: what threshold measures against when the allocator has no cap (null: the
  // device's total, from the CUDA driver, or the host's physical memory).
  // `log`: one line per release; null prints to stderr.
  ReleaseScheduler(memory::Allocator& allocator, ReleasePolicy policy,
                   std::function<int64_t()> capacity = nullptr,
                   std::function<void(const std::string&)> log = nullptr);
  ReleaseScheduler(const ReleaseScheduler&) = delete;
  ReleaseScheduler& operator=(const ReleaseScheduler&) = delete;

  void attach(StepCallbacks& callbacks);
  // Follows the step (step_begin starts a peak) and acts at safe points only.
  void on_point(const StepInfo& info);

  const std::vector<ReleaseRecord>& releases() const { return releases_; }
  int64_t released_bytes() const;
  int64_t refused_unsafe() const { return refused_unsafe_; }  // calls outside safe points

 private:
  bool safe_now() const;
  void release(const StepInfo& info, int64_t target_reserved, const std::string& reason,
               int64_t unused_since = INT64_MAX);

  memory::Allocator& allocator_;
  ReleasePolicy policy_;
  std::function<int64_t()> capacity_;
  std::function<void(const std::string&)> log_;
  std::vector<ReleaseRecord> releases_;
  int64_t last_release_step_ = -1;
  int64_t refused_unsafe_ = 0;
  // adaptive: the step in flight's peak of allocated bytes, and its first allocation's number
  std::optional<memory::PeakTracker> step_peak_;
  int64_t step_first_allocation_ = 0;
  // adaptive: the last window_steps steps' peaks and first allocations' numbers
  std::deque<std::pair<int64_t, int64_t>> window_;
};

}  // namespace frugal::train
