// Private pools (Note [Private pools for captured graphs] in memory/caching_allocator.h): what a
// capture allocates stays out of everyone else's reach until the graph is released.
#include <gtest/gtest.h>

#include <thread>

#include "memory/caching_allocator.h"
#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::memory::testing::addr_of;
using frugal::memory::testing::FakeDevice;

namespace {
constexpr StreamId kPool = 1001;
}

TEST(PrivatePool, RequestsWhileOpenComeFromTheirOwnSegments) {
  FakeDevice dev;
  DataPtr outside = dev.alloc.allocate(4096);
  DataPtr freed_outside = dev.alloc.allocate(4096);
  const uintptr_t free_before = addr_of(freed_outside);
  freed_outside.reset();  // a cached default-stream block the pool must not take
  dev.alloc.open_private_pool(kPool);
  DataPtr inside = dev.alloc.allocate(4096);
  EXPECT_NE(addr_of(inside), free_before);
  EXPECT_EQ(dev.source->alloc_calls, 2);  // a segment of the pool's own
  dev.alloc.close_private_pool();
  int pool_segments = 0;
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) pool_segments += seg.stream == kPool;
  EXPECT_EQ(pool_segments, 1);
  dev.alloc.check_invariants();
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
