// The arena packing (memory/arena_plan.h): overlapping lifetimes never share bytes (fuzzed), the
// bound is the live peak, small cases land on it, and bad lifetimes are refused.
#include "memory/arena_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "base/error.h"

using namespace frugal::memory;

namespace {

void expect_no_overlap(const std::vector<Lifetime>& l, const ArenaPlan& p) {
  ASSERT_EQ(p.offsets.size(), l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % kRoundBytes, 0u);
    EXPECT_LE(p.offsets[i] + round_request(l[i].bytes), p.arena_bytes);
    for (size_t j = i + 1; j < l.size(); ++j) {
      const bool in_time = l[i].begin < l[j].end && l[j].begin < l[i].end;
      const bool in_space = p.offsets[i] < p.offsets[j] + round_request(l[j].bytes) &&
                            p.offsets[j] < p.offsets[i] + round_request(l[i].bytes);
      ASSERT_FALSE(in_time && in_space) << "allocations " << i << " and " << j << " collide";
    }
  }
}

}  // namespace

TEST(ArenaPlan, ReusesTheBytesOfWhatWasFreed) {
  // A chain: each tensor lives from its making to the making of the one after next.
  std::vector<Lifetime> l = {{1024, 0, 2}, {2048, 1, 3}, {1024, 2, 4}};
  ArenaPlan p = plan_arena(l);
  expect_no_overlap(l, p);
  EXPECT_EQ(p.lower_bound, 3072u);
  EXPECT_EQ(p.arena_bytes, 3072u);
  EXPECT_EQ(p.offsets[0], p.offsets[2]);  // made when the first was freed: same bytes
}

TEST(ArenaPlan, RoundsToTheAllocatorsGranule) {
  std::vector<Lifetime> l = {{1, 0, 1}, {513, 0, 1}};
  ArenaPlan p = plan_arena(l);
  expect_no_overlap(l, p);
  EXPECT_EQ(p.arena_bytes, 512u + 1024u);
  EXPECT_EQ(p.lower_bound, 1536u);
}

TEST(ArenaPlan, EmptyAndBadLifetimes) {
  ArenaPlan p = plan_arena({});
  EXPECT_EQ(p.arena_bytes, 0u);
  EXPECT_EQ(p.lower_bound, 0u);
  EXPECT_THROW(plan_arena({{512, 3, 3}}), frugal::Error);
}

TEST(ArenaPlan, RandomLifetimesNeverCollideAndStayNearTheBound) {
  std::mt19937_64 rng(7);
  double worst = 1.0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 120);
    std::vector<Lifetime> l;
    for (int i = 0; i < n; ++i) {
      const int64_t begin = static_cast<int64_t>(rng() % 200);
      const int64_t len = 1 + static_cast<int64_t>(rng() % 60);
      const size_t bytes = 1 + rng() % (trial % 2 == 0 ? 4096 : (1 << 20));
      l.push_back({bytes, begin, begin + len});
    }
    ArenaPlan p = plan_arena(l);
    expect_no_overlap(l, p);
    EXPECT_GE(p.arena_bytes, p.lower_bound);
    EXPECT_EQ(p.lower_bound, peak_live_bytes(l));
    worst = std::max(worst, static_cast<double>(p.arena_bytes) / p.lower_bound);
  }
  // Random lifetimes are much harder than a step's: the skyline packings stay within 6% (4.7%
  // here; greedy and the local search that came before them, 7.4%).
  EXPECT_LT(worst, 1.06);
}

TEST(ArenaPlan, TheDenseClockKeepsEveryOrderAndOverlap) {
  const std::vector<Lifetime> l = {{512, 10, 40}, {512, 40, 90}, {1024, 25, 1000}, {512, -5, 10}};
  const std::vector<Lifetime> d = on_dense_clock(l);
  ASSERT_EQ(d.size(), l.size());
  // Distinct moments -5, 10, 25, 40, 90, 1000 become 0..5.
  EXPECT_EQ(d[0].begin, 1);
  EXPECT_EQ(d[0].end, 3);
  EXPECT_EQ(d[1].begin, 3);
  EXPECT_EQ(d[2].end, 5);
  EXPECT_EQ(d[3].begin, 0);
  for (size_t a = 0; a < l.size(); ++a) {
    EXPECT_EQ(d[a].bytes, l[a].bytes);
    for (size_t b = 0; b < l.size(); ++b) {
      const bool overlap = l[a].begin < l[b].end && l[b].begin < l[a].end;
      EXPECT_EQ(d[a].begin < d[b].end && d[b].begin < d[a].end, overlap) << a << " " << b;
    }
  }
  EXPECT_EQ(peak_live_bytes(d), peak_live_bytes(l));
}
