// An allocation observer that keeps every event it hears while it lives (Note [Allocation
// events] in memory/events.h), for tests that check what allocators and scopes report.
#pragma once

#include <vector>

#include "memory/events.h"

namespace frugal::test {

struct EventRecorder : memory::AllocationObserver {
  std::vector<memory::AllocationEvent> events;
  EventRecorder() { memory::add_allocation_observer(this); }
  ~EventRecorder() override { memory::remove_allocation_observer(this); }
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;
  void on_event(const memory::AllocationEvent& e) override { events.push_back(e); }
};

}  // namespace frugal::test
