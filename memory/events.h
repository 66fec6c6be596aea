// Allocations as events with tags (DESIGN.md, "The memory architecture", point 2).
//
// Note [Allocation events]
// Every allocation starts and ends in a DataPtr, whatever the allocator: that is where events
// come from. While at least one AllocationObserver is registered, each DataPtr notes the tag
// current on its thread when it was allocated and reports its allocation and its release with
// the device and byte count; with none registered the cost is one relaxed atomic load (the
// scopes below only set thread-locals, and no tag is looked up). Tags are thread-local scopes:
//   - the phase of the training step (train::train_step opens PhaseScopes);
//   - an explicit category (kernel workspace); a category not set explicitly follows the phase;
//   - the module path (nn::Module's call operator opens a ModuleScope);
//   - the op (each op entry in core/ and nn/functional opens an OpScope; the outermost op wins,
//     so linear's matmul counts as linear and autocast's casts as the op that lowered its
//     inputs; the autograd engine runs each node, and the gradient sums it passes on, as
//     "<op> backward" under the module path the node was recorded in).
// An allocation's tag is an interned AllocationTag: one record per distinct (op, module,
// category, phase), made on first use and never freed, so a DataPtr keeps one pointer to it and
// an observer may keep the pointer too. Allocators add events of their own, tagged the same way:
// a segment mapped or unmapped (the caching allocator's reserve_segment / return_segment) and
// an out-of-memory failure (before OutOfMemoryError is thrown). Observers that count live bytes
// look at alloc and free only. One stream of events serves the peak tracker below, the step
// recorder (step_trace.h), the allocation trace (allocation_trace.h), the leak check
// (leak_check.h) and, later, the memory monitor.
//
//   memory::PeakTracker peak(Device::meta());            // observes while alive
//   { memory::PhaseScope fw(memory::Phase::forward); ... }
//   peak.peak_bytes(); peak.at_peak();                   // when, where and of what the peak is
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "base/device.h"
#include "base/scoped_value.h"

namespace frugal::memory {

enum class Phase : uint8_t { outside, forward, backward, optimizer };
// What an allocation is for, as far as its tags tell: allocated outside a step (parameters,
// buffers, the batch, optimizer state of earlier steps), in the forward (what survives it is
// saved for backward), in the backward (gradients and transients), in the optimizer step (state
// made lazily, transients), a kernel's workspace, or the bounded workspace of a cuDNN
// convolution, which every step asks for alike (Note [Bounded conv workspace] in
// kernels/conv_workspace.h).
enum class Category : uint8_t { resident, forward, backward, optimizer, workspace, conv_workspace };
constexpr int kNumCategories = 6;
const char* phase_name(Phase p);
const char* category_name(Category c);

class PhaseScope {
 public:
  explicit PhaseScope(Phase p);

 private:
  ScopedValue<Phase> set_;  // Note [Scoped thread-local settings]
};

class CategoryScope {
 public:
  explicit CategoryScope(Category c);

 private:
  ScopedValue<int> set_;  // Note [Scoped thread-local settings]
};

// Note [Kernel scratch]
// A kernel's workspace (kernels::Context::workspace) is released before the kernel entry that asked
// for it returns. Requests made under a ScratchScope say so, and during a planned step the caching
// allocator places them in bytes of the arena that nothing lives in at that moment (Note [Planned
// steps]) instead of caching a segment for them that stays reserved through every step (18-22 MiB
// of depthwise and batch-norm partial sums in MobileNetV2 and EfficientNet-B0 on the H200). A
// kernel may ask for planned bytes while its scratch lives (cuDNN's bounded workspace while a
// staged weight gradient waits for its cast), so scratch keeps clear of the next planned entries
// too; scratch no free run holds gets a cached segment of the largest such scratch's size, which
// the smaller ones share. cuBLAS's workspace, which lives on, is not scratch.
class ScratchScope {
 public:
  explicit ScratchScope(bool on = true);

 private:
  ScopedValue<bool> set_;  // Note [Scoped thread-local settings]
};
bool in_scratch_scope();

// Requests made under a ResidentBlockScope live for the whole run, one block for many tensors
// (Note [Flat resident tensors] in core/flat_tensors.h), or come back at one size every step
// (the DataLoader's staged batch, data/copy_stager.cpp). Unless a cached block no larger than its
// 2 MiB-rounded size holds one, the caching allocator maps a segment of that size for it, instead
// of carving it from a larger cached block or a 20 MiB segment whose rest would stay around it.
class ResidentBlockScope {
 public:
  ResidentBlockScope();

 private:
  ScopedValue<bool> set_;  // Note [Scoped thread-local settings]
};
bool in_resident_block_scope();

// The dotted path of the modules running on this thread ("features.3"); an empty name adds no
// component.
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& name);
  // Sets the whole path (null: the top level): the autograd engine runs a node's backward under
  // the path its forward was recorded in.
  explicit ModuleScope(std::shared_ptr<const std::string> path);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  std::shared_ptr<const std::string> prev_;
};

// The op running on this thread (Note [Allocation events]). `op` must outlive the scope (a
// literal, or the node name the engine holds). A forward op inside another op keeps the outer
// name; a backward scope (the engine's, one per node) replaces whatever is current.
class OpScope {
 public:
  explicit OpScope(const char* op, bool backward = false);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* prev_op_;
  bool prev_backward_;
};

Phase current_phase();
Category current_category();
const std::shared_ptr<const std::string>& current_module_path();  // null at the top level
const char* current_op();  // null outside any op; see current_op_is_backward
bool current_op_is_backward();

// What an allocation was made under. Interned (Note [Allocation events]): compare by pointer.
struct AllocationTag {
  std::string op;                             // "conv2d", "conv2d backward"; "" outside any op
  std::shared_ptr<const std::string> module;  // "features.3"; null at the top level
  Category category = Category::resident;
  Phase phase = Phase::outside;
  std::string name;  // "features.3/conv2d", "features.3", "conv2d", or "" when untagged
};
// The tag of this thread's scopes now. Takes a lock on a miss of a per-thread cache: call it
// only while observing.
const AllocationTag* current_tag();
// Of releases whose allocation nobody observed: resident, no op, no module.
const AllocationTag* untagged();

enum class EventKind : uint8_t { alloc, free, segment_map, segment_unmap, oom };
const char* event_kind_name(EventKind k);  // "alloc", "free", "segment map", ...

struct AllocationEvent {
  EventKind kind = EventKind::alloc;
  Device device;
  // alloc, free: the bytes asked for (the DataPtr's size, before rounding); segment map/unmap:
  // the segment's bytes (what reserved changes by); oom: the request that failed.
  size_t bytes = 0;
  // Pairs an allocation with its release: unique per observed allocation, 0 for a release whose
  // allocation nobody observed (made before the first observer came) and for the other kinds.
  uint64_t id = 0;
  // alloc and free: the allocation's tag (untagged() for a release nobody saw allocated); the
  // other kinds: the tag of the thread that mapped, unmapped or failed. Never null.
  const AllocationTag* tag = nullptr;
  uintptr_t address = 0;  // of the allocation or segment; 0 when unknown (meta, oom)
  // alloc, free: what the allocator's allocated statistic moves by, its block after rounding
  // (`bytes` where the allocator counts what was asked for); 0 for the other kinds. Follow
  // this, not `bytes`, from a base of allocated_bytes.current.
  size_t counted = 0;

  bool is_alloc() const { return kind == EventKind::alloc; }
  bool is_free() const { return kind == EventKind::free; }
  Category category() const { return tag->category; }
};
// "features.3/conv2d": the module path and op of the event's tag, either alone when the other
// is missing, "" for neither. A reference into the interned tag: valid until exit.
const std::string& tag_name(const AllocationEvent& e);

class AllocationObserver {
 public:
  virtual ~AllocationObserver() = default;
  // Called on the allocating or releasing thread; must not allocate device memory.
  virtual void on_event(const AllocationEvent& e) = 0;
};
void add_allocation_observer(AllocationObserver* o);
void remove_allocation_observer(AllocationObserver* o);
bool observing();                                  // any observer registered
void notify_allocation(const AllocationEvent& e);  // to every observer
uint64_t next_event_id();                          // 1, 2, 3, ... (thread-safe)
// A segment mapped or unmapped, or an out-of-memory failure, tagged with this thread's scopes;
// one relaxed load when nobody observes. Allocators call it, under their lock if they like.
inline void notify_memory_event(EventKind kind, Device device, size_t bytes,
                                uintptr_t address = 0) {
  if (observing()) notify_allocation({kind, device, bytes, 0, current_tag(), address});
}

// Live bytes of one device by category, and the moment of their largest sum: the bytes of each
// category then, the phase and the module path of the allocation that reached it. Observes from
// construction to destruction; `baseline` counts as resident (what was live before). Bytes as
// the allocator counts them (AllocationEvent::counted): from a baseline of
// allocated_bytes.current, the peak is the allocator's allocated peak over the same time.
class PeakTracker : public AllocationObserver {
 public:
  explicit PeakTracker(Device device, int64_t baseline = 0);
  ~PeakTracker() override;
  void on_event(const AllocationEvent& e) override;

  struct Moment {
    int64_t bytes = 0;
    std::array<int64_t, kNumCategories> by_category{};
    Phase phase = Phase::outside;
    std::string module;  // "" at the top level
  };
  Moment at_peak() const;
  int64_t peak_bytes() const { return at_peak().bytes; }

 private:
  Device device_;
  mutable std::mutex mu_;
  std::array<int64_t, kNumCategories> live_{};
  Moment peak_;
};

}  // namespace frugal::memory
