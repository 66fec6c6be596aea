// Private pools (Note [Private pools for captured graphs] in memory/caching_allocator.h): what a
// capture allocates stays out of everyone else's reach until the graph is released.
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "memory/caching_allocator.h"
#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::memory::testing::addr_of;
using frugal::memory::testing::FakeDevice;

namespace {
constexpr StreamId kPool = 1001;
}

TEST(PrivatePool, RequestsWhileOpenBorrowCachedFreeBytesBeforeMappingSegments) {
  FakeDevice dev;
  DataPtr outside = dev.alloc.allocate(4096);
  DataPtr freed_outside = dev.alloc.allocate(4096);
  const uintptr_t free_before = addr_of(freed_outside);
  freed_outside.reset();  // cached free bytes of the default stream's small segment
  dev.alloc.open_private_pool(kPool);
  DataPtr inside = dev.alloc.allocate(4096);
  EXPECT_EQ(addr_of(inside), free_before);  // lent to the pool: no segment mapped for it
  EXPECT_EQ(dev.source->alloc_calls, 1);
  DataPtr large = dev.alloc.allocate(3 * kMiB);  // nothing cached holds it: the pool's own
  EXPECT_EQ(dev.source->alloc_calls, 2);
  dev.alloc.check_invariants();
  inside.reset();  // a capture's temporary: a replay writes there again
  dev.alloc.close_private_pool();
  DataPtr after = dev.alloc.allocate(4096);
  EXPECT_NE(addr_of(after), free_before);  // the lent block stays the pool's
  bool lent_in_default_segment = false;
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) {
    if (seg.stream != kDefaultStream) continue;
    for (const BlockSnapshot& b : seg.blocks) lent_in_default_segment |= b.stream == kPool;
  }
  EXPECT_TRUE(lent_in_default_segment);
  dev.alloc.open_private_pool(kPool);  // a recapture finds it among the pool's free blocks
  DataPtr recapture = dev.alloc.allocate(4096);
  EXPECT_EQ(addr_of(recapture), free_before);
  recapture.reset();
  dev.alloc.close_private_pool();
  dev.alloc.check_invariants();

  after.reset();
  large.reset();
  dev.alloc.release_private_pool(kPool);  // the lent bytes rejoin their segment's free bytes
  dev.alloc.check_invariants();
  outside.reset();
  dev.alloc.empty_cache();
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, 0);
}

// A large cached block is lent whole: a capture's scratch of 6 MiB, then of 15 MiB, both fit
// in the one cached 16 MiB segment, as they do in the eager steps.
TEST(PrivatePool, ALargeCachedBlockIsLentWholeAndHoldsEachRequestInTurn) {
  FakeDevice dev;
  DataPtr scratch = dev.alloc.allocate(15 * kMiB);  // a 16 MiB segment, then cached
  const uintptr_t cached = addr_of(scratch);
  scratch.reset();
  dev.alloc.open_private_pool(kPool);
  DataPtr small_first = dev.alloc.allocate(6 * kMiB);
  EXPECT_EQ(addr_of(small_first), cached);
  small_first.reset();
  DataPtr large_next = dev.alloc.allocate(15 * kMiB);
  EXPECT_EQ(addr_of(large_next), cached);
  EXPECT_EQ(dev.source->alloc_calls, 1);  // no segment of the pool's own
  large_next.reset();
  dev.alloc.close_private_pool();
  DataPtr outside = dev.alloc.allocate(1 * kMiB + 4096);  // the lent block stays the pool's
  EXPECT_EQ(dev.source->alloc_calls, 2);
  dev.alloc.check_invariants();
  outside.reset();
  dev.alloc.release_private_pool(kPool);
  dev.alloc.empty_cache();
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, 0);
}

TEST(PrivatePool, ItsFreedBlocksServeOnlyTheReopenedPool) {
  FakeDevice dev;
  dev.alloc.open_private_pool(kPool);
  DataPtr temp = dev.alloc.allocate(8192);
  const uintptr_t temp_addr = addr_of(temp);
  temp.reset();  // a capture's temporary: free for the capture to reuse
  DataPtr again = dev.alloc.allocate(8192);
  EXPECT_EQ(addr_of(again), temp_addr);
  again.reset();
  dev.alloc.close_private_pool();
  DataPtr after = dev.alloc.allocate(8192);  // a replay would overwrite temp_addr: not here
  EXPECT_NE(addr_of(after), temp_addr);
  dev.alloc.open_private_pool(kPool);
  DataPtr recapture = dev.alloc.allocate(8192);
  EXPECT_EQ(addr_of(recapture), temp_addr);
  dev.alloc.close_private_pool();
  dev.alloc.check_invariants();
}

TEST(PrivatePool, OutsideBlocksFreedWhileOpenAreHeldUntilRelease) {
  FakeDevice dev;
  DataPtr old_grad = dev.alloc.allocate(4096);
  const uintptr_t grad_addr = addr_of(old_grad);
  const int64_t allocated = dev.alloc.stats().allocated_bytes.current;
  dev.alloc.open_private_pool(kPool);
  old_grad.reset();  // a captured kernel may have read it: it stays allocated
  dev.alloc.close_private_pool();
  EXPECT_EQ(dev.alloc.stats().allocated_bytes.current, allocated);
  DataPtr other = dev.alloc.allocate(4096);
  EXPECT_NE(addr_of(other), grad_addr);
  other.reset();
  dev.alloc.check_invariants();

  dev.alloc.release_private_pool(kPool);
  EXPECT_EQ(dev.alloc.stats().allocated_bytes.current, 0);
  DataPtr reuse = dev.alloc.allocate(4096);
  EXPECT_EQ(addr_of(reuse), grad_addr);
  dev.alloc.check_invariants();
}

TEST(PrivatePool, ReleaseHandsThePoolsMemoryToTheDefaultStream) {
  FakeDevice dev;
  dev.alloc.open_private_pool(kPool);
  DataPtr kept = dev.alloc.allocate(4096);  // e.g. the captured step's loss, still held
  DataPtr temp = dev.alloc.allocate(4096);
  const uintptr_t temp_addr = addr_of(temp);
  temp.reset();
  dev.alloc.close_private_pool();
  dev.alloc.release_private_pool(kPool);
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) EXPECT_EQ(seg.stream, kDefaultStream);
  DataPtr reuse = dev.alloc.allocate(4096);
  EXPECT_EQ(addr_of(reuse), temp_addr);
  EXPECT_EQ(dev.source->alloc_calls, 1);
  kept.reset();  // freed after the release: an ordinary default-stream block
  dev.alloc.check_invariants();
}

TEST(PrivatePool, OnlyTheOpeningThreadIsRedirected) {
  FakeDevice dev;
  dev.alloc.open_private_pool(kPool);
  DataPtr from_other;
  std::thread([&] { from_other = dev.alloc.allocate(4096); }).join();
  dev.alloc.close_private_pool();
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) EXPECT_EQ(seg.stream, kDefaultStream);
  dev.alloc.check_invariants();
}

TEST(PrivatePool, MisuseIsNamed) {
  FakeDevice dev;
  EXPECT_THROW(dev.alloc.open_private_pool(kDefaultStream), Error);
  dev.alloc.open_private_pool(kPool);
  try {
    dev.alloc.open_private_pool(kPool + 1);
    FAIL() << "nested pools were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not nest"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dev.alloc.release_private_pool(kPool), Error);  // still open
  dev.alloc.close_private_pool();
  dev.alloc.release_private_pool(kPool);
}

TEST(PrivatePool, EmptyCacheAndTrimKeepALivePoolsFreeSegments) {
  FakeDevice dev;
  dev.alloc.open_private_pool(kPool);
  DataPtr temp = dev.alloc.allocate(8192);  // the capture's temporary: a replay writes there
  temp.reset();
  dev.alloc.close_private_pool();
  DataPtr cached = dev.alloc.allocate(4096);
  cached.reset();  // a free default-stream segment beside the pool's
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(dev.alloc.trim_cache(0), 2 * kMiB);  // the default stream's only
  dev.alloc.empty_cache();
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, static_cast<int64_t>(2 * kMiB));
  dev.alloc.release_private_pool(kPool);  // the graph is gone: its memory may go too
  dev.alloc.empty_cache();
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, 0);
  dev.alloc.check_invariants();
}

// Random traffic around captures: no two live blocks overlap, and while a pool lives nothing
// outside it is handed bytes a capture was given (a replay writes there), lent ones included.
TEST(PrivatePool, RandomTrafficNeverHandsACapturesBytesToAnyoneElse) {
  FakeDevice dev;
  std::mt19937 rng(12);
  struct Live {
    DataPtr ptr;
    size_t size;
  };
  std::vector<Live> live;
  std::vector<std::pair<uintptr_t, uintptr_t>> captured;  // [begin, end) the pool was given
  bool open = false, pool_alive = false;
  auto overlaps = [](uintptr_t a, size_t n, uintptr_t b, uintptr_t e) {
    return a < e && b < a + n;
  };
  for (int i = 0; i < 4000; ++i) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 5 && live.size() < 40) {  // at most ~500 MiB of the fake device's 1 GiB
      const size_t sizes[] = {512, 4096, 300000, 1 * kMiB + 512, 3 * kMiB, 12 * kMiB};
      const size_t n = sizes[rng() % 6] + rng() % 2048;
      DataPtr p = dev.alloc.allocate(n);
      const uintptr_t a = addr_of(p);
      for (const Live& l : live)
        ASSERT_FALSE(overlaps(a, n, addr_of(l.ptr), addr_of(l.ptr) + l.size)) << i;
      if (open) {
        captured.emplace_back(a, a + n);
      } else {
        for (const auto& [b, e] : captured) ASSERT_FALSE(overlaps(a, n, b, e)) << "request " << i;
      }
      live.push_back({std::move(p), n});
    } else if (op < 8 && !live.empty()) {
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(rng() % live.size()));
    } else if (op == 8) {
      if (open) {
        dev.alloc.close_private_pool();
      } else {
        dev.alloc.open_private_pool(kPool);
        pool_alive = true;
      }
      open = !open;
    } else if (!open && pool_alive) {  // the graph is gone
      dev.alloc.release_private_pool(kPool);
      captured.clear();
      pool_alive = false;
    }
    dev.alloc.check_invariants();
  }
  if (open) dev.alloc.close_private_pool();
  if (pool_alive) dev.alloc.release_private_pool(kPool);
  live.clear();
  dev.alloc.check_invariants();
  dev.alloc.empty_cache();
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, 0);  // every lent block rejoined its segment
}

// A large block lent to a reopened pool merges with the pool's free neighbour, as a freed block
// does: kept apart, the two could not serve a request as large as both (a segment was mapped
// for it), and the invariants' check failed.
TEST(PrivatePool, ALentBlockMergesWithThePoolsFreeNeighbour) {
  FakeDevice dev;
  DataPtr x = dev.alloc.allocate(8 * kMiB), y = dev.alloc.allocate(8 * kMiB);  // [8][8][4 free]
  x.reset();
  dev.alloc.open_private_pool(kPool);
  DataPtr p = dev.alloc.allocate(3 * kMiB);  // lends the 4 MiB tail
  dev.alloc.close_private_pool();
  y.reset();
  p.reset();  // [16 free, default][4 free, pool]
  dev.alloc.open_private_pool(kPool);
  DataPtr q = dev.alloc.allocate(10 * kMiB);  // lends the 16 MiB block beside the pool's 4
  dev.alloc.check_invariants();
  q.reset();
  const int maps = dev.source->alloc_calls;
  DataPtr r = dev.alloc.allocate(18 * kMiB);  // the merged 20 MiB holds it
  EXPECT_EQ(dev.source->alloc_calls, maps);
  r.reset();
  dev.alloc.close_private_pool();
  dev.alloc.release_private_pool(kPool);
  dev.alloc.check_invariants();
}

// Out of memory while a graph is captured: the cached segments are not given back to retry, since
// nothing may free device memory inside a capture (PyTorch skips that release too); the request
// fails at once. Outside a capture the same request frees the cache and succeeds.
TEST(PrivatePool, AnOutOfMemoryWhileCapturingFreesNothing) {
  FakeDevice dev;
  dev.alloc.set_memory_cap_bytes(48 * kMiB);
  { DataPtr cached = dev.alloc.allocate(30 * kMiB); }  // a cached, free 30 MiB segment
  const int frees = dev.source->free_calls;
  dev.alloc.open_private_pool(kPool);
  EXPECT_THROW(dev.alloc.allocate(40 * kMiB), OutOfMemoryError);
  EXPECT_EQ(dev.source->free_calls, frees) << "a segment was freed inside the capture";
  EXPECT_EQ(dev.alloc.stats().num_alloc_retries, 0);
  dev.alloc.close_private_pool();
  DataPtr after = dev.alloc.allocate(40 * kMiB);
  EXPECT_EQ(dev.source->free_calls, frees + 1);
  after.reset();
  dev.alloc.release_private_pool(kPool);
  dev.alloc.check_invariants();
}
