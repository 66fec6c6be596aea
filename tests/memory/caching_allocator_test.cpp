// The caching allocator's policy on a fake device: rounding, pools, reuse, best fit, split and
// merge, streams, empty_cache and statistics. Caps, retries and OOM are in caching_oom_test.cpp.
#include "memory/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::memory::testing::addr_of;
using frugal::memory::testing::FakeDevice;

namespace {
constexpr size_t kKiB = 1024;
}

TEST(CachingAllocator, PolicyFunctions) {
  EXPECT_EQ(round_request(1), 512u);
  EXPECT_EQ(round_request(512), 512u);
  EXPECT_EQ(round_request(513), 1024u);
  EXPECT_EQ(round_request(kMiB + 1), kMiB + 512);
  EXPECT_EQ(segment_bytes_for(512), 2 * kMiB);
  EXPECT_EQ(segment_bytes_for(kMiB), 2 * kMiB);
  EXPECT_EQ(segment_bytes_for(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(segment_bytes_for(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(segment_bytes_for(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(segment_bytes_for(10 * kMiB + 512), 12 * kMiB);
  EXPECT_EQ(segment_bytes_for(21 * kMiB), 22 * kMiB);
}

TEST(CachingAllocator, RoundsRequestsAndCountsRequestedApart) {
  FakeDevice dev;
  DataPtr p1 = dev.alloc.allocate(1);
  DataPtr p2 = dev.alloc.allocate(513);
  DataPtr p3 = dev.alloc.allocate(1024);
  DataPtr none = dev.alloc.allocate(0);
  EXPECT_EQ(none.get(), nullptr);
  EXPECT_EQ(p1.size(), 1u);
  EXPECT_EQ(p2.size(), 513u);
  // Carved one after the other from the same 2 MiB segment.
  EXPECT_EQ(addr_of(p2), addr_of(p1) + 512);
  EXPECT_EQ(addr_of(p3), addr_of(p2) + 1024);
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.current, 512 + 1024 + 1024);
  EXPECT_EQ(s.requested_bytes.current, 1 + 513 + 1024);
  EXPECT_EQ(s.active_bytes.current, s.allocated_bytes.current);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.allocation.current, 3);
  EXPECT_EQ(s.segment.current, 1);
  p2.reset();
  s = dev.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.current, 512 + 1024);
  EXPECT_EQ(s.requested_bytes.current, 1 + 1024);
  EXPECT_EQ(s.allocated_bytes.peak, 512 + 1024 + 1024);
  dev.alloc.check_invariants();
}

TEST(CachingAllocator, SmallAndLargePoolSegmentSizes) {
  FakeDevice dev;
  auto& seg = dev.source->segment_sizes;
  // Largest first, so that no request fits in an earlier segment's free tail.
  DataPtr c = dev.alloc.allocate(10 * kMiB);
  DataPtr d = dev.alloc.allocate(11 * kMiB);  // its 1 MiB tail stays unsplit (not > 1 MiB)
  DataPtr b = dev.alloc.allocate(kMiB + 1);
  DataPtr a = dev.alloc.allocate(kMiB);
  EXPECT_EQ(seg, (std::vector<size_t>{10 * kMiB, 12 * kMiB, 20 * kMiB, 2 * kMiB}));
  // Later requests are served from the free tails of their own pool's segments.
  DataPtr e = dev.alloc.allocate(4096);
  EXPECT_EQ(addr_of(e), addr_of(a) + kMiB);
  DataPtr f = dev.alloc.allocate(2 * kMiB);
  EXPECT_EQ(addr_of(f), addr_of(b) + kMiB + 512);
  EXPECT_EQ(seg.size(), 4u);
  // The small segment is now full: a small request takes a new 2 MiB segment even though the
  // large pool has 17 MiB free.
  DataPtr g = dev.alloc.allocate(kMiB - 4096);
  EXPECT_EQ(seg.size(), 4u);
  DataPtr h = dev.alloc.allocate(512);
  EXPECT_EQ(seg.size(), 5u);
  EXPECT_EQ(seg.back(), 2 * kMiB);
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, static_cast<int64_t>(46 * kMiB));
  dev.alloc.check_invariants();
}

TEST(CachingAllocator, ReusesFreedBlockAtSameAddress) {
  FakeDevice dev;
  DataPtr p = dev.alloc.allocate(4096);
  const uintptr_t small_addr = addr_of(p);
  p.reset();
  DataPtr q = dev.alloc.allocate(4000);  // rounds to the same 4096 B
  EXPECT_EQ(addr_of(q), small_addr);
  DataPtr big = dev.alloc.allocate(50 * kMiB);
  const uintptr_t big_addr = addr_of(big);
  big.reset();
  // 49 MiB from the cached 50 MiB block: the 1 MiB tail is not > 1 MiB, so no split.
  DataPtr big2 = dev.alloc.allocate(49 * kMiB);
  EXPECT_EQ(addr_of(big2), big_addr);
  EXPECT_EQ(dev.source->alloc_calls, 2);
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.current, static_cast<int64_t>(50 * kMiB + 4096));
  EXPECT_EQ(s.requested_bytes.current, static_cast<int64_t>(49 * kMiB + 4000));
  dev.alloc.check_invariants();
}

TEST(CachingAllocator, BestFitPicksSmallestSufficientBlockThenLowestAddress) {
  FakeDevice dev;
  DataPtr a = dev.alloc.allocate(400 * kKiB);
  DataPtr b = dev.alloc.allocate(50 * kKiB);
  DataPtr c = dev.alloc.allocate(200 * kKiB);
  DataPtr d = dev.alloc.allocate(50 * kKiB);
  const uintptr_t a_addr = addr_of(a), c_addr = addr_of(c);
  a.reset();
  c.reset();
  // Free: 400 KiB at a, 200 KiB at c, 1348 KiB tail. First fit would take a.
  DataPtr x = dev.alloc.allocate(150 * kKiB);
  EXPECT_EQ(addr_of(x), c_addr);
  DataPtr y = dev.alloc.allocate(300 * kKiB);
  EXPECT_EQ(addr_of(y), a_addr);
  // Free: 100 KiB at a+300K, 50 KiB at c+150K, the tail.
  DataPtr z = dev.alloc.allocate(60 * kKiB);
  EXPECT_EQ(addr_of(z), a_addr + 300 * kKiB);
  dev.alloc.check_invariants();

  // Equal sizes: the lower address wins, whatever the order they were freed in.
  FakeDevice dev2;
  DataPtr p1 = dev2.alloc.allocate(64 * kKiB);
  DataPtr sep1 = dev2.alloc.allocate(512);
  DataPtr p2 = dev2.alloc.allocate(64 * kKiB);
  DataPtr sep2 = dev2.alloc.allocate(512);
  const uintptr_t low = addr_of(p1);
  p2.reset();
  p1.reset();
  DataPtr q = dev2.alloc.allocate(64 * kKiB);
  EXPECT_EQ(addr_of(q), low);
}

// A request no device could hold fails as out of memory: rounded, it wrapped to a 0-byte block
// that shared its address with the next allocation.
TEST(CachingAllocator, ARequestPastAnyDeviceIsOutOfMemory) {
  FakeDevice dev;
  EXPECT_THROW(dev.alloc.allocate(SIZE_MAX - 100), OutOfMemoryError);
  EXPECT_THROW(dev.alloc.allocate(kMaxRequestBytes + 1), OutOfMemoryError);
  DataPtr ok = dev.alloc.allocate(4096);
  dev.alloc.check_invariants();
  EXPECT_EQ(dev.alloc.stats().allocation.current, 1);
  // Counted as out-of-memory errors, as every other one (the monitor and leak check read them).
  EXPECT_EQ(dev.alloc.stats().num_ooms, 2);
}

TEST(CachingAllocator, LargeAndSmallSplitThresholds) {
  FakeDevice dev;
  DataPtr a = dev.alloc.allocate(2 * kMiB);   // 20 MiB segment, 18 MiB tail split off
  DataPtr b = dev.alloc.allocate(17 * kMiB);  // tail of 1 MiB is not > 1 MiB: b takes 18 MiB
  EXPECT_EQ(addr_of(b), addr_of(a) + 2 * kMiB);
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(s.requested_bytes.current, static_cast<int64_t>(19 * kMiB));
  EXPECT_EQ(s.inactive_split_bytes.current, 0);
  DataPtr c = dev.alloc.allocate(kMiB);
  DataPtr d = dev.alloc.allocate(kMiB - 512);  // small pool: a 512 B tail is worth keeping
  std::vector<SegmentSnapshot> snap = dev.alloc.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  const SegmentSnapshot& small = snap[0].small_pool ? snap[0] : snap[1];
  ASSERT_EQ(small.blocks.size(), 3u);
  EXPECT_EQ(small.blocks[2].offset, 2 * kMiB - 512);
  EXPECT_EQ(small.blocks[2].size, 512u);
  EXPECT_FALSE(small.blocks[2].allocated);
  EXPECT_EQ(small.blocks[1].requested, kMiB - 512);
  DataPtr e = dev.alloc.allocate(100);
  EXPECT_EQ(addr_of(e), addr_of(d) + kMiB - 512);
  EXPECT_EQ(dev.alloc.stats().segment.current, 2);
  dev.alloc.check_invariants();
}

// Counts maximal runs of free blocks: what the segment must hold after merging.
static int free_runs(const std::array<bool, 5>& is_free) {
  int runs = 0;
  for (size_t i = 0; i < is_free.size(); ++i) runs += is_free[i] && (i == 0 || !is_free[i - 1]);
  return runs;
}

TEST(CachingAllocator, SplitAndMergeInEveryFreeOrder) {
  const std::array<size_t, 4> sizes = {100 * kKiB, 200 * kKiB, 300 * kKiB, 400 * kKiB};
  std::array<int, 4> order = {0, 1, 2, 3};
  int permutations = 0;
  do {
    FakeDevice dev;
    std::array<DataPtr, 4> p;
    for (size_t i = 0; i < 4; ++i) p[i] = dev.alloc.allocate(sizes[i]);
    std::array<bool, 5> is_free = {false, false, false, false, true};  // the tail is free
    for (int i : order) {
      p[static_cast<size_t>(i)].reset();
      is_free[static_cast<size_t>(i)] = true;
      dev.alloc.check_invariants();
      std::vector<SegmentSnapshot> snap = dev.alloc.snapshot();
      ASSERT_EQ(snap.size(), 1u);
      int free_blocks = 0;
      for (const BlockSnapshot& b : snap[0].blocks) free_blocks += !b.allocated;
      EXPECT_EQ(free_blocks, free_runs(is_free));
    }
    std::vector<SegmentSnapshot> snap = dev.alloc.snapshot();
    ASSERT_EQ(snap[0].blocks.size(), 1u);
    EXPECT_EQ(snap[0].blocks[0].size, 2 * kMiB);
    EXPECT_FALSE(snap[0].blocks[0].allocated);
    MemoryStats s = dev.alloc.stats();
    EXPECT_EQ(s.allocated_bytes.current, 0);
    EXPECT_EQ(s.inactive_split_bytes.current, 0);
    EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(2 * kMiB));
    permutations++;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 24);
}

TEST(CachingAllocator, InactiveSplitTracksFreeBlocksInPartlyUsedSegments) {
  FakeDevice dev;
  DataPtr x = dev.alloc.allocate(100 * kKiB);
  DataPtr y = dev.alloc.allocate(200 * kKiB);
  DataPtr z = dev.alloc.allocate(300 * kKiB);
  auto inactive = [&] { return dev.alloc.stats().inactive_split_bytes.current; };
  EXPECT_EQ(inactive(), static_cast<int64_t>(1448 * kKiB));  // the free tail
  y.reset();
  EXPECT_EQ(inactive(), static_cast<int64_t>(1648 * kKiB));
  z.reset();  // merges y, z and the tail
  EXPECT_EQ(inactive(), static_cast<int64_t>(1948 * kKiB));
  EXPECT_EQ(dev.alloc.stats().inactive_split_bytes.peak, static_cast<int64_t>(1948 * kKiB));
  x.reset();  // the segment is whole again: cached, not split
  EXPECT_EQ(inactive(), 0);
  dev.alloc.check_invariants();
}

TEST(CachingAllocator, StreamsKeepSeparateCaches) {
  FakeDevice dev;
  DataPtr p = dev.alloc.allocate(4096, 1);
  const uintptr_t on_1 = addr_of(p);
  p.reset();
  DataPtr q = dev.alloc.allocate(4096, 2);
  EXPECT_NE(addr_of(q), on_1);
  EXPECT_EQ(dev.source->alloc_calls, 2);
  DataPtr r = dev.alloc.allocate(4096, 1);
  EXPECT_EQ(addr_of(r), on_1);
  DataPtr s = dev.alloc.allocate(4096);  // the default stream, 0: a third segment
  EXPECT_EQ(dev.source->alloc_calls, 3);
  std::vector<StreamId> streams;
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) streams.push_back(seg.stream);
  std::sort(streams.begin(), streams.end());
  EXPECT_EQ(streams, (std::vector<StreamId>{0, 1, 2}));
  dev.alloc.check_invariants();
}

TEST(CachingAllocator, EmptyCacheReturnsOnlyWholeFreeSegments) {
  FakeDevice dev;
  DataPtr a = dev.alloc.allocate(kMiB);
  DataPtr b = dev.alloc.allocate(kMiB);  // a and b fill segment 1
  DataPtr c = dev.alloc.allocate(kMiB);  // segment 2, half used
  DataPtr big = dev.alloc.allocate(30 * kMiB);
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, static_cast<int64_t>(34 * kMiB));
  a.reset();
  b.reset();
  big.reset();
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, static_cast<int64_t>(34 * kMiB));
  EXPECT_EQ(dev.alloc.empty_cache(), static_cast<int64_t>(32 * kMiB));
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.reserved_bytes.peak, static_cast<int64_t>(34 * kMiB));
  EXPECT_EQ(s.segment.current, 1);
  EXPECT_EQ(s.allocated_bytes.current, static_cast<int64_t>(kMiB));
  EXPECT_EQ(dev.source->free_calls, 2);
  ASSERT_EQ(dev.source->live.size(), 1u);
  EXPECT_EQ(dev.source->live.begin()->first, addr_of(c));
  dev.alloc.check_invariants();
  c.reset();
  EXPECT_EQ(dev.alloc.empty_cache(), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, 0);
  EXPECT_TRUE(dev.source->live.empty());
  dev.alloc.check_invariants();
}

TEST(CachingAllocator, ResetPeakStats) {
  FakeDevice dev;
  DataPtr a = dev.alloc.allocate(10 * kMiB);
  DataPtr b = dev.alloc.allocate(3000);
  a.reset();
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<int64_t>(10 * kMiB + 3072));
  EXPECT_EQ(s.requested_bytes.peak, static_cast<int64_t>(10 * kMiB + 3000));
  EXPECT_EQ(s.allocation.peak, 2);
  dev.alloc.reset_peak_stats();
  s = dev.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.peak, 3072);
  EXPECT_EQ(s.requested_bytes.peak, 3000);
  EXPECT_EQ(s.reserved_bytes.peak, s.reserved_bytes.current);
  EXPECT_EQ(s.allocation.peak, 1);
  DataPtr c = dev.alloc.allocate(1000);
  EXPECT_EQ(dev.alloc.stats().allocated_bytes.peak, 3072 + 1024);
}

TEST(CachingAllocator, DestructorReturnsEverySegment) {
  auto source = std::make_unique<frugal::memory::testing::FakeDeviceSource>(size_t{1} << 30);
  size_t leaked = 12345;
  source->used_at_destruction = &leaked;
  {
    CachingAllocator alloc(std::move(source), Device::cuda(1));
    EXPECT_EQ(alloc.device(), Device::cuda(1));
    DataPtr a = alloc.allocate(5000);
    DataPtr b = alloc.allocate(30 * kMiB);
    a.reset();
    b.reset();
    EXPECT_EQ(alloc.stats().reserved_bytes.current, static_cast<int64_t>(32 * kMiB));
  }
  EXPECT_EQ(leaked, 0u);
}

// Note [Flat resident tensors]: a block that lives for the whole run gets a segment of its own
// 2 MiB-rounded size, not a 20 MiB one, nor a larger cached block whose rest it would pin.
TEST(CachingAllocator, AResidentBlockGetsASegmentOfItsOwnSize) {
  FakeDevice dev;
  DataPtr scratch = dev.alloc.allocate(15 * kMiB);  // a 16 MiB segment, then cached
  scratch.reset();
  DataPtr params, small_params, fits;
  {
    ResidentBlockScope resident;
    params = dev.alloc.allocate(5 * kMiB + 4096);  // not from the cached 16 MiB
    small_params = dev.alloc.allocate(3 * kMiB);   // not in a 20 MiB segment
    EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, static_cast<int64_t>((16 + 6 + 4) * kMiB));
    fits = dev.alloc.allocate(15 * kMiB + 4096);  // the cached block is its own size
    EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, static_cast<int64_t>((16 + 6 + 4) * kMiB));
  }
  DataPtr transient = dev.alloc.allocate(3 * kMiB);  // outside the scope: a 20 MiB segment
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current,
            static_cast<int64_t>((16 + 6 + 4 + 20) * kMiB));
  dev.alloc.check_invariants();
}
