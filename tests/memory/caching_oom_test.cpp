// The caching allocator under memory pressure: the cap, the free-cache-and-retry path, the OOM
// message, and an allocator that stays consistent and usable after an OOM.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "common/error_of.h"
#include "memory/caching_allocator.h"
#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::memory::testing::addr_of;
using frugal::memory::testing::FakeDevice;
using frugal::test::error_of;

namespace {

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing '" << part << "' in:\n" << text;
}

}  // namespace

TEST(CachingAllocatorOom, CapHitThrowsWithTheNumbersAndStaysUsable) {
  FakeDevice dev(100 * kMiB);
  dev.alloc.set_memory_cap_bytes(30 * kMiB);
  EXPECT_EQ(dev.alloc.memory_cap_bytes(), 30 * kMiB);
  DataPtr a = dev.alloc.allocate(5 * kMiB);  // a 20 MiB segment
  const uintptr_t a_addr = addr_of(a);
  // 16 MiB does not fit the 15 MiB free tail and needs a 16 MiB segment: 36 MiB reserved would
  // pass the 30 MiB cap.
  std::string msg = error_of<OutOfMemoryError>([&] { dev.alloc.allocate(16 * kMiB); });
  expect_contains(msg, "cuda:0 out of memory: tried to allocate 16.0 MiB (16777216 bytes),");
  expect_contains(msg, "segment of 16.0 MiB (16777216 bytes)");
  expect_contains(msg, "exceed the memory cap");
  expect_contains(msg, "memory cap: 30.0 MiB (31457280 bytes)");
  expect_contains(msg,
                  "device total: 100.0 MiB (104857600 bytes), free: 80.0 MiB (83886080 bytes)");
  expect_contains(msg, "allocated: 5.0 MiB (5242880 bytes)");
  expect_contains(msg, "reserved but unallocated: 15.0 MiB (15728640 bytes)");
  expect_contains(msg, "cuda:0 memory at the failed request");  // the summary table
  expect_contains(msg, "| Reserved memory");
  expect_contains(msg, "try: --precision f16");
  expect_contains(msg, "--memory-budget");
  EXPECT_EQ(dev.source->alloc_calls, 1);  // the cap refused before the device was asked
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.allocated_bytes.current, static_cast<int64_t>(5 * kMiB));
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(20 * kMiB));
  dev.alloc.check_invariants();

  DataPtr b = dev.alloc.allocate(kMiB);  // a 2 MiB segment still fits under the cap
  a.reset();
  DataPtr c = dev.alloc.allocate(16 * kMiB);  // now served from the cached 20 MiB segment
  EXPECT_EQ(addr_of(c), a_addr);
  EXPECT_EQ(dev.alloc.stats().num_ooms, 1);
  dev.alloc.check_invariants();
}

TEST(CachingAllocatorOom, MemoryFractionOfTotal) {
  FakeDevice dev(100 * kMiB);
  dev.alloc.set_memory_fraction(0.25);
  EXPECT_EQ(dev.alloc.memory_cap_bytes(), 26214400u);
  DataPtr a = dev.alloc.allocate(20 * kMiB);
  std::string msg =
      error_of<OutOfMemoryError>([&] { dev.alloc.allocate(4 * kMiB); });  // +20 MiB segment
  expect_contains(msg, "memory cap: 25.0 MiB (26214400 bytes)");
  EXPECT_THROW(dev.alloc.set_memory_fraction(0.0), Error);
  EXPECT_THROW(dev.alloc.set_memory_fraction(1.5), Error);
  // A cap below what is reserved only stops new segments: cached space is still handed out.
  a.reset();
  dev.alloc.set_memory_cap_bytes(kMiB);
  DataPtr b = dev.alloc.allocate(8 * kMiB);
  EXPECT_EQ(dev.source->alloc_calls, 1);
  dev.alloc.set_memory_cap_bytes(0);  // no cap
  DataPtr c = dev.alloc.allocate(30 * kMiB);
  dev.alloc.check_invariants();
}

TEST(CachingAllocatorOom, CapRetryFreesCachedSegments) {
  FakeDevice dev;
  dev.alloc.set_memory_cap_bytes(50 * kMiB);
  DataPtr x = dev.alloc.allocate(30 * kMiB);
  x.reset();
  DataPtr y = dev.alloc.allocate(40 * kMiB);  // 30 cached + 40 > 50: free the cache, retry
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(dev.source->free_calls, 1);
  dev.alloc.check_invariants();
}

TEST(CachingAllocatorOom, SourceFailsOnceRetrySucceeds) {
  FakeDevice dev;
  DataPtr x = dev.alloc.allocate(30 * kMiB);
  DataPtr keep = dev.alloc.allocate(4096);  // a segment in use is never released
  x.reset();
  dev.source->fail_next = 1;
  DataPtr y = dev.alloc.allocate(40 * kMiB);
  ASSERT_NE(y.get(), nullptr);
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(dev.source->alloc_calls, 4);  // x, keep, the failure, the retry
  EXPECT_EQ(dev.source->free_calls, 1);   // only x's cached 30 MiB segment
  EXPECT_EQ(dev.source->live.size(), 2u);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(42 * kMiB));
  dev.alloc.check_invariants();
}

TEST(CachingAllocatorOom, SourceFailsTwiceThrowsAndRecovers) {
  FakeDevice dev;
  DataPtr a = dev.alloc.allocate(3000);
  dev.source->fail_next = 2;
  std::string msg = error_of<OutOfMemoryError>([&] { dev.alloc.allocate(12 * kMiB + 7); });
  expect_contains(msg, "tried to allocate 12.0 MiB (12582919 bytes), rounded to 12583424 bytes");
  expect_contains(msg, "the device has no room");
  expect_contains(msg, "memory cap: none");
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.requested_bytes.current, 3000);
  dev.alloc.check_invariants();
  DataPtr b = dev.alloc.allocate(12 * kMiB + 7);
  EXPECT_EQ(dev.alloc.stats().segment.current, 2);
  dev.alloc.check_invariants();
}

TEST(CachingAllocatorOom, DeviceFullAfterFlushingTheCache) {
  FakeDevice dev(64 * kMiB);
  DataPtr small = dev.alloc.allocate(100);
  small.reset();  // a cached 2 MiB segment, flushed by the retry
  DataPtr a = dev.alloc.allocate(40 * kMiB);
  std::string msg = error_of<OutOfMemoryError>([&] { dev.alloc.allocate(30 * kMiB); });
  expect_contains(msg, "device total: 64.0 MiB (67108864 bytes), free: 24.0 MiB (25165824 bytes)");
  expect_contains(msg, "allocated: 40.0 MiB (41943040 bytes)");
  expect_contains(msg, "reserved but unallocated: 0.0 MiB (0 bytes)");
  EXPECT_EQ(dev.source->free_calls, 1);
  EXPECT_EQ(dev.alloc.stats().segment.current, 1);
  dev.alloc.check_invariants();
  DataPtr b = dev.alloc.allocate(20 * kMiB);
  EXPECT_EQ(dev.source->used(), 60 * kMiB);
  msg = error_of<OutOfMemoryError>([&] { dev.alloc.allocate(65 * kMiB); });
  expect_contains(msg, "(the request alone is larger than the device)");
  EXPECT_EQ(dev.alloc.stats().num_ooms, 2);
}
