// SegmentCounter, the statistics of the CPU, meta and pinned host allocators: every allocation a
// segment of its own, a cap checked under the same lock as the count, peaks reset to current.
#include "memory/segment_counter.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

using namespace frugal::memory;

TEST(SegmentCounter, CountsEachAllocationAsASegment) {
  SegmentCounter c;
  ASSERT_TRUE(c.add(100));
  ASSERT_TRUE(c.add(28));
  MemoryStats s = c.stats();
  for (const Stat* st :
       {&s.allocated_bytes, &s.requested_bytes, &s.reserved_bytes, &s.active_bytes}) {
    EXPECT_EQ(st->current, 128);
    EXPECT_EQ(st->peak, 128);
  }
  EXPECT_EQ(s.allocation.current, 2);
  EXPECT_EQ(s.segment.current, 2);
  c.remove(100);
  s = c.stats();
  EXPECT_EQ(s.reserved_bytes.current, 28);
  EXPECT_EQ(s.reserved_bytes.peak, 128);
  EXPECT_EQ(s.reserved_bytes.freed, 100);
  EXPECT_EQ(s.segment.current, 1);
  EXPECT_EQ(s.segment.allocated, 2);
  EXPECT_EQ(s.num_ooms, 0);
}

TEST(SegmentCounter, ACapRefusesAndCountsAnOom) {
  SegmentCounter c;
  ASSERT_TRUE(c.add(60, 100));
  EXPECT_TRUE(c.add(40, 100));  // exactly at the cap
  EXPECT_FALSE(c.add(1, 100));  // one byte past it
  EXPECT_TRUE(c.add(1000));     // no cap
  const MemoryStats s = c.stats();
  EXPECT_EQ(s.reserved_bytes.current, 1100);
  EXPECT_EQ(s.allocation.current, 3);
  EXPECT_EQ(s.num_ooms, 1);
  c.count_oom();
  EXPECT_EQ(c.stats().num_ooms, 2);
}

TEST(SegmentCounter, ResetPeaksBringsEveryPeakToCurrent) {
  SegmentCounter c;
  ASSERT_TRUE(c.add(500));
  ASSERT_TRUE(c.add(20));
  c.remove(500);
  c.reset_peaks();
  const MemoryStats s = c.stats();
  for (const Stat* st : {&s.allocated_bytes, &s.requested_bytes, &s.reserved_bytes, &s.active_bytes,
                         &s.allocation, &s.segment}) {
    EXPECT_EQ(st->peak, st->current);
  }
  EXPECT_EQ(s.reserved_bytes.peak, 20);
  EXPECT_EQ(s.reserved_bytes.allocated, 520);  // totals stay
}

TEST(SegmentCounter, ConcurrentAddsNeverPassTheCap) {
  SegmentCounter c;
  constexpr size_t kCap = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) (void)c.add(7, kCap);
    });
  }
  for (std::thread& t : threads) t.join();
  const MemoryStats s = c.stats();
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(kCap / 7 * 7));
  EXPECT_EQ(s.allocation.current + s.num_ooms, 8 * 500);
}
