// Random alloc/free sequences (with injected device failures and OOMs) and concurrent use: after
// every step the allocator's invariants hold and its numbers match what the test tracks itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "base/error.h"
#include "memory/caching_allocator.h"
#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::memory::testing::addr_of;
using frugal::memory::testing::FakeDevice;

namespace {

struct Live {
  DataPtr ptr;
  size_t requested;
  StreamId stream;
};

size_t random_request(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double kind = u(rng);
  // Log-uniform within each band so that tiny and band-edge sizes both show up.
  auto log_uniform = [&](double lo, double hi) {
    return static_cast<size_t>(std::exp(std::log(lo) + u(rng) * (std::log(hi) - std::log(lo))));
  };
  if (kind < 0.6) return log_uniform(1, static_cast<double>(kMiB));
  if (kind < 0.9) return log_uniform(static_cast<double>(kMiB), static_cast<double>(10 * kMiB));
  return log_uniform(static_cast<double>(10 * kMiB), static_cast<double>(40 * kMiB));
}

// The live blocks, checked against the test's own bookkeeping: stats, no overlap, inside a
// segment the source handed out.
void check_against_reference(FakeDevice& dev, const std::vector<Live>& live) {
  dev.alloc.check_invariants();
  MemoryStats s = dev.alloc.stats();
  size_t requested = 0, rounded = 0, slack_bound = 0;
  std::vector<std::pair<uintptr_t, size_t>> ranges;
  for (const Live& l : live) {
    requested += l.requested;
    const size_t r = round_request(l.requested);
    rounded += r;
    // A small block is exactly its rounded size; a large one may keep an unsplit tail <= 1 MiB.
    if (r > kSmallRequestMax) slack_bound += kLargeSplitMin;
    ranges.emplace_back(addr_of(l.ptr), r);
  }
  ASSERT_EQ(s.requested_bytes.current, static_cast<int64_t>(requested));
  ASSERT_EQ(s.allocation.current, static_cast<int64_t>(live.size()));
  ASSERT_GE(s.allocated_bytes.current, static_cast<int64_t>(rounded));
  ASSERT_LE(s.allocated_bytes.current, static_cast<int64_t>(rounded + slack_bound));
  ASSERT_EQ(s.reserved_bytes.current, static_cast<int64_t>(dev.source->used()));
  ASSERT_LE(s.inactive_split_bytes.current, s.reserved_bytes.current - s.allocated_bytes.current);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i > 0) {
      ASSERT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first);
    }
    auto seg = dev.source->live.upper_bound(ranges[i].first);
    ASSERT_NE(seg, dev.source->live.begin());
    --seg;
    ASSERT_LE(ranges[i].first + ranges[i].second, seg->first + seg->second);
  }
}

}  // namespace

TEST(CachingAllocatorStress, RandomSequencesKeepInvariants) {
  for (uint64_t seed : {7u, 1234u, 99991u}) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    FakeDevice dev(160 * kMiB);
    std::vector<Live> live;
    int ooms = 0, injected = 0;
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int step = 0; step < 3000; ++step) {
      const double op = u(rng);
      if (op < 0.55 || live.empty()) {
        const size_t bytes = random_request(rng);
        const StreamId stream = rng() % 3;
        if (u(rng) < 0.02) {
          dev.source->fail_next = 1;
          injected++;
        }
        try {
          live.push_back({dev.alloc.allocate(bytes, stream), bytes, stream});
        } catch (const OutOfMemoryError&) {
          ooms++;
        }
        dev.source->fail_next = 0;
      } else if (op < 0.99) {
        const size_t i = rng() % live.size();
        std::swap(live[i], live.back());
        live.pop_back();
      } else {
        dev.alloc.empty_cache();
      }
      check_against_reference(dev, live);
      if (::testing::Test::HasFatalFailure()) return;
    }
    MemoryStats s = dev.alloc.stats();
    EXPECT_EQ(s.num_ooms, ooms);
    EXPECT_GT(ooms, 0);  // the 160 MiB device is small enough to run out
    EXPECT_GE(s.num_alloc_retries, ooms);
    EXPECT_GT(injected, 0);
    live.clear();
    dev.alloc.empty_cache();
    EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, 0);
    EXPECT_TRUE(dev.source->live.empty());
  }
}

TEST(CachingAllocatorStress, ConcurrentThreadsNeverShareMemory) {
  FakeDevice dev;
  std::mutex mu;
  std::map<uintptr_t, size_t> in_use;  // every live block across threads
  int overlaps = 0;
  constexpr int kThreads = 4, kSteps = 1500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 31 + 5);
      std::vector<DataPtr> mine;
      for (int step = 0; step < kSteps; ++step) {
        if (rng() % 2 == 0 || mine.empty()) {
          const size_t bytes = 1 + rng() % (3 * kMiB);
          DataPtr p = dev.alloc.allocate(bytes, static_cast<StreamId>(t % 2));
          std::lock_guard<std::mutex> lock(mu);
          const uintptr_t a = addr_of(p);
          auto next = in_use.lower_bound(a);
          if (next != in_use.end() && next->first < a + bytes) overlaps++;
          if (next != in_use.begin() && std::prev(next)->first + std::prev(next)->second > a) {
            overlaps++;
          }
          in_use[a] = bytes;
          mine.push_back(std::move(p));
        } else {
          const size_t i = rng() % mine.size();
          {
            std::lock_guard<std::mutex> lock(mu);
            in_use.erase(addr_of(mine[i]));
          }
          std::swap(mine[i], mine.back());
          mine.pop_back();
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      for (const DataPtr& p : mine) in_use.erase(addr_of(p));
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(overlaps, 0);
  dev.alloc.check_invariants();
  MemoryStats s = dev.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.allocation.current, 0);
  EXPECT_EQ(s.allocation.allocated, s.allocation.freed);
  EXPECT_GT(s.allocation.allocated, kThreads * kSteps / 4);
}
