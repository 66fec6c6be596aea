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
  // Random lifetimes are much harder than a step's; greedy by size still stays within 2x.
  EXPECT_LT(worst, 2.0);
}
