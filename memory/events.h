// Allocations as events with tags (DESIGN.md, "The memory architecture", point 2).
//
// Note [Allocation events]
// Every allocation starts and ends in a DataPtr, whatever the allocator: that is where events
// come from. While at least one AllocationObserver is registered, each DataPtr notes the tag
// current on its thread when it was allocated (its Category) and reports its allocation and its
// release with the device and byte count; with none registered the cost is one relaxed atomic
// load. Tags are thread-local scopes: the phase of the training step (train::train_step opens
// them), an explicit category (kernel workspace), and the module path (nn::Module's call
// operator opens a ModuleScope). A category not set explicitly follows the phase. One stream of
// events serves the peak tracker below and, later, the monitor, the leak check and the planner.
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

namespace frugal::memory {

enum class Phase : uint8_t { outside, forward, backward, optimizer };
// What an allocation is for, as far as its tags tell: allocated outside a step (parameters,
// buffers, the batch, optimizer state of earlier steps), in the forward (what survives it is
// saved for backward), in the backward (gradients and transients), in the optimizer step (state
// made lazily, transients), or a kernel's workspace.
enum class Category : uint8_t { resident, forward, backward, optimizer, workspace };
constexpr int kNumCategories = 5;
const char* phase_name(Phase p);
const char* category_name(Category c);

class PhaseScope {
 public:
  explicit PhaseScope(Phase p);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase prev_;
};

class CategoryScope {
 public:
  explicit CategoryScope(Category c);
  ~CategoryScope();
  CategoryScope(const CategoryScope&) = delete;
  CategoryScope& operator=(const CategoryScope&) = delete;

 private:
  int prev_;
};

// The dotted path of the modules running on this thread ("features.3"); an empty name adds no
// component.
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& name);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  std::shared_ptr<const std::string> prev_;
};

Phase current_phase();
Category current_category();
const std::shared_ptr<const std::string>& current_module_path();  // null at the top level

struct AllocationEvent {
  bool allocated = true;  // false: released
  Device device;
  size_t bytes = 0;
  Category category = Category::resident;
  // Pairs an allocation with its release: unique per observed allocation, 0 for a release whose
  // allocation nobody observed (made before the first observer came).
  uint64_t id = 0;
};

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

// Live bytes of one device by category, and the moment of their largest sum: the bytes of each
// category then, the phase and the module path of the allocation that reached it. Observes from
// construction to destruction; `baseline` counts as resident (what was live before).
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
