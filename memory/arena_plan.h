// Offsets in one arena for a known sequence of allocations (the step planner's packing), and the
// bound it is measured against.
//
// Policy (the whole of it):
//   - every size is rounded as the caching allocator rounds it (round_request in rounding.h:
//     512 B), so every offset is 512-byte aligned;
//   - greedy (Pisarchyk and Lee, "Efficient Memory Management for Deep Neural Net Inference",
//     2020): allocations are placed one by one, each into the smallest gap, among the already
//     placed allocations whose lifetimes overlap its own, that holds it, or above them all when no
//     gap does; two orders are tried and the smaller arena kept: by size, largest first (their
//     "greedy by size"), and by size times lifetime, largest first (ties: the earlier first);
//   - when that is still more than 1% above the bound, a local search swaps the places of a few
//     of the 96 largest allocations in the better greedy order and keeps what packs smaller, for
//     at most 400 packings (100 without progress) or until within 0.1% of the bound (fixed seed:
//     the same plan every time); then the same from the other order while still above 1%.
//     Checkpointed EfficientNet-B0 needs it: 8.7% above the bound by either order; at the bound
//     after about 80 swaps of the size order, and since cuDNN's workspace is in the trace (Note
//     [Bounded conv workspace]) 1.6% above it from the area order, where the size order's search
//     stays at 8.7%;
//   - two allocations overlap in time when begin_a < end_b and begin_b < end_a (an allocation made
//     at the moment another was freed may take its bytes);
//   - the bound: no packing can be smaller than the largest sum of live (rounded) bytes at any
//     moment, peak_live_bytes(). On the step traces of the model zoo the plan lands within 5% of
//     it (tests/train/step_planner_test.cpp, bench/RESULTS.md).
// Quadratic in the number of allocations in the worst case: a step of the zoo has a few thousand,
// planned once.
//
//   std::vector<memory::Lifetime> l = {{1024, 0, 2}, {2048, 1, 3}, {1024, 2, 4}};
//   memory::ArenaPlan p = memory::plan_arena(l);
//   // p.arena_bytes == 3072: the third is made when the first is freed and takes its bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memory/rounding.h"

namespace frugal::memory {

// One allocation: its bytes, and the moments (any increasing clock, e.g. event indices) it was
// made and released. begin < end.
struct Lifetime {
  size_t bytes = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

struct ArenaPlan {
  std::vector<size_t> offsets;  // one per lifetime, in the order given
  size_t arena_bytes = 0;       // the highest offset + size
  size_t lower_bound = 0;       // peak_live_bytes of the same lifetimes
};

// Throws frugal::Error for a lifetime with begin >= end.
ArenaPlan plan_arena(const std::vector<Lifetime>& lifetimes);

// The largest sum of rounded bytes live at one moment.
size_t peak_live_bytes(const std::vector<Lifetime>& lifetimes);

}  // namespace frugal::memory
