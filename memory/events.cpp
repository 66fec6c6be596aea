// Allocation events and their tags (Note [Allocation events] in memory/events.h).
#include "memory/events.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace frugal::memory {
namespace {

thread_local Phase t_phase = Phase::outside;
thread_local int t_category = -1;  // -1: follow the phase
thread_local std::shared_ptr<const std::string> t_module;
thread_local const char* t_op = nullptr;
thread_local bool t_op_backward = false;

std::atomic<int> g_observer_count{0};
std::mutex g_observers_mu;
std::vector<AllocationObserver*>& observers() {
  static std::vector<AllocationObserver*> list;
  return list;
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::outside:
      return "outside a step";
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::optimizer:
      return "optimizer step";
  }
  return "?";
}

const char* category_name(Category c) {
  switch (c) {
    case Category::resident:
      return "resident (parameters, buffers, batch, optimizer state)";
    case Category::forward:
      return "forward (saved for backward)";
    case Category::backward:
      return "backward (gradients, transients)";
    case Category::optimizer:
      return "optimizer step";
    case Category::workspace:
      return "kernel workspace";
    case Category::conv_workspace:
      return "convolution workspace (cuDNN, bounded)";
  }
  return "?";
}

PhaseScope::PhaseScope(Phase p) : set_(t_phase, p) {}
namespace {
thread_local bool t_scratch = false;
}  // namespace
ScratchScope::ScratchScope(bool on) : set_(t_scratch, t_scratch || on) {}
bool in_scratch_scope() { return t_scratch; }
namespace {
thread_local bool t_resident_block = false;
}  // namespace
ResidentBlockScope::ResidentBlockScope() : set_(t_resident_block, true) {}
bool in_resident_block_scope() { return t_resident_block; }

CategoryScope::CategoryScope(Category c) : set_(t_category, static_cast<int>(c)) {}

ModuleScope::ModuleScope(const std::string& name) : prev_(t_module) {
  if (name.empty()) return;
  t_module = std::make_shared<const std::string>(prev_ ? *prev_ + "." + name : name);
}
ModuleScope::ModuleScope(std::shared_ptr<const std::string> path) : prev_(t_module) {
  t_module = std::move(path);
}
ModuleScope::~ModuleScope() { t_module = std::move(prev_); }

OpScope::OpScope(const char* op, bool backward) : prev_op_(t_op), prev_backward_(t_op_backward) {
  if (t_op != nullptr && !backward) return;  // the outermost forward op names the allocation
  t_op = op;
  t_op_backward = backward;
}
OpScope::~OpScope() {
  t_op = prev_op_;
  t_op_backward = prev_backward_;
}

const char* current_op() { return t_op; }
bool current_op_is_backward() { return t_op_backward; }

Phase current_phase() { return t_phase; }
const std::shared_ptr<const std::string>& current_module_path() { return t_module; }

Category current_category() {
  if (t_category >= 0) return static_cast<Category>(t_category);
  switch (t_phase) {
    case Phase::outside:
      return Category::resident;
    case Phase::forward:
      return Category::forward;
    case Phase::backward:
      return Category::backward;
    case Phase::optimizer:
      return Category::optimizer;
  }
  return Category::resident;
}

void add_allocation_observer(AllocationObserver* o) {
  std::lock_guard<std::mutex> lock(g_observers_mu);
  observers().push_back(o);
  g_observer_count.fetch_add(1, std::memory_order_relaxed);
}

void remove_allocation_observer(AllocationObserver* o) {
  std::lock_guard<std::mutex> lock(g_observers_mu);
  auto& list = observers();
  auto it = std::find(list.begin(), list.end(), o);
  if (it == list.end()) return;
  list.erase(it);
  g_observer_count.fetch_sub(1, std::memory_order_relaxed);
}

const char* event_kind_name(EventKind k) {
  switch (k) {
    case EventKind::alloc:
      return "alloc";
    case EventKind::free:
      return "free";
    case EventKind::segment_map:
      return "segment map";
    case EventKind::segment_unmap:
      return "segment unmap";
    case EventKind::oom:
      return "out of memory";
  }
  return "?";
}

const std::string& tag_name(const AllocationEvent& e) {
  return (e.tag != nullptr ? e.tag : untagged())->name;
}

bool observing() { return g_observer_count.load(std::memory_order_relaxed) > 0; }

uint64_t next_event_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void notify_allocation(const AllocationEvent& e) {
  std::lock_guard<std::mutex> lock(g_observers_mu);
  for (AllocationObserver* o : observers()) o->on_event(e);
}

PeakTracker::PeakTracker(Device device, int64_t baseline) : device_(device) {
  live_[static_cast<size_t>(Category::resident)] = baseline;
  peak_.bytes = baseline;
  peak_.by_category = live_;
  add_allocation_observer(this);
}

PeakTracker::~PeakTracker() { remove_allocation_observer(this); }

void PeakTracker::on_event(const AllocationEvent& e) {
  if (e.device != device_ || (!e.is_alloc() && !e.is_free())) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto n = static_cast<int64_t>(e.counted);
  live_[static_cast<size_t>(e.category())] += e.is_alloc() ? n : -n;
  if (!e.is_alloc()) return;
  int64_t total = 0;
  for (int64_t v : live_) total += v;
  if (total <= peak_.bytes) return;
  peak_.bytes = total;
  peak_.by_category = live_;
  peak_.phase = current_phase();
  peak_.module = current_module_path() ? *current_module_path() : "";
}

PeakTracker::Moment PeakTracker::at_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

}  // namespace frugal::memory
