// Allocation events (Note [Allocation events]): every DataPtr reports its allocation and release
// with the tags of its thread, and the peak tracker sees what the allocator's statistics see.
#include <gtest/gtest.h>

#include "common/event_recorder.h"
#include "memory/allocator.h"
#include "memory/events.h"

using namespace frugal;
using namespace frugal::memory;

using test::EventRecorder;

TEST(AllocationEvents, EveryAllocationAndReleaseIsReportedWithItsTags) {
  EventRecorder rec;
  {
    DataPtr a = cpu_allocator().allocate(1000);
    PhaseScope fw(Phase::forward);
    DataPtr b = meta_allocator().allocate(2000);
    CategoryScope ws(Category::workspace);
    DataPtr c = cpu_allocator().allocate(3000);
  }
  ASSERT_EQ(rec.events.size(), 6u);
  EXPECT_TRUE(rec.events[0].is_alloc());
  EXPECT_EQ(rec.events[0].bytes, 1000u);
  EXPECT_EQ(rec.events[0].category(), Category::resident);
  EXPECT_EQ(rec.events[1].device, Device::meta());
  EXPECT_EQ(rec.events[1].category(), Category::forward);
  EXPECT_EQ(rec.events[2].category(), Category::workspace);
  // Released in reverse order, each with the category it was allocated under.
  EXPECT_TRUE(rec.events[3].is_free());
  EXPECT_EQ(rec.events[3].category(), Category::workspace);
  EXPECT_EQ(rec.events[4].category(), Category::forward);
  EXPECT_EQ(rec.events[5].category(), Category::resident);
}

TEST(AllocationEvents, NothingIsReportedWithoutObservers) {
  EXPECT_FALSE(observing());
  {
    EventRecorder rec;
    EXPECT_TRUE(observing());
  }
  EXPECT_FALSE(observing());
}

TEST(AllocationEvents, PeakTrackerFindsTheMomentAndItsMakeUp) {
  const int64_t before = cpu_allocator().stats().allocated_bytes.current;
  PeakTracker tracker(Device::cpu(), before);
  cpu_allocator().reset_peak_stats();
  DataPtr params = cpu_allocator().allocate(4096);
  {
    PhaseScope fw(Phase::forward);
    ModuleScope m("features");
    ModuleScope m3("3");
    DataPtr act = cpu_allocator().allocate(10000);
    PhaseScope bw(Phase::backward);
    DataPtr grad = cpu_allocator().allocate(5000);
  }
  DataPtr small = cpu_allocator().allocate(100);  // after the peak: changes nothing
  PeakTracker::Moment p = tracker.at_peak();
  EXPECT_EQ(p.bytes, cpu_allocator().stats().allocated_bytes.peak);
  EXPECT_EQ(p.bytes, before + 4096 + 10000 + 5000);
  EXPECT_EQ(p.phase, Phase::backward);
  EXPECT_EQ(p.module, "features.3");
  EXPECT_EQ(p.by_category[static_cast<size_t>(Category::resident)], before + 4096);
  EXPECT_EQ(p.by_category[static_cast<size_t>(Category::forward)], 10000);
  EXPECT_EQ(p.by_category[static_cast<size_t>(Category::backward)], 5000);
  // Other devices are not its business.
  DataPtr elsewhere = meta_allocator().allocate(1 << 20);
  EXPECT_EQ(tracker.peak_bytes(), p.bytes);
}
