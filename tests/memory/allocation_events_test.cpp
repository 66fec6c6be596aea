// Allocation events (Note [Allocation events]): every DataPtr reports its allocation and release
// with the tags of its thread, and the peak tracker sees what the allocator's statistics see.
#include <gtest/gtest.h>

#include "common/event_recorder.h"
#include "memory/allocator.h"
#include "memory/events.h"
#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;

using frugal::memory::testing::FakeDevice;
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

// The caching allocator counts a block's bytes, not the request's: a request rounds up to 512
// bytes, and a large one keeps a whole free block whose tail is too small to split off. Events
// carry those counted bytes, so a tracker's peak is the allocator's own allocated peak; with the
// requested bytes it fell short by each tail.
TEST(AllocationEvents, EventsCarryTheBytesTheAllocatorCounts) {
  FakeDevice dev;
  const Device d = Device::cuda(0);  // the fake device's name
  EventRecorder rec;
  PeakTracker tracker(d, dev.alloc.stats().allocated_bytes.current);
  DataPtr a = dev.alloc.allocate(2 * kMiB);   // a 20 MiB segment, its 18 MiB tail split off
  DataPtr b = dev.alloc.allocate(17 * kMiB);  // a 1 MiB tail is not split: b holds 18 MiB
  DataPtr c = dev.alloc.allocate(1);          // 512 bytes in the small pool
  EXPECT_EQ(a.counted(), 2 * kMiB);
  EXPECT_EQ(b.counted(), 18 * kMiB);
  EXPECT_EQ(c.counted(), 512u);
  b.reset();
  const MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(tracker.peak_bytes(), s.allocated_bytes.peak);
  EXPECT_EQ(tracker.peak_bytes(), static_cast<int64_t>(20 * kMiB + 512));
  std::vector<AllocationEvent> b_events;
  for (const AllocationEvent& e : rec.events) {
    if (e.bytes == 17 * kMiB) b_events.push_back(e);
  }
  ASSERT_EQ(b_events.size(), 2u);
  EXPECT_TRUE(b_events[0].is_alloc());
  EXPECT_TRUE(b_events[1].is_free());
  for (const AllocationEvent& e : b_events) EXPECT_EQ(e.counted, 18 * kMiB);
  // The host allocator counts what was asked for.
  DataPtr h = cpu_allocator().allocate(1000);
  EXPECT_EQ(h.counted(), 1000u);
  EXPECT_EQ(rec.events.back().counted, 1000u);
}
