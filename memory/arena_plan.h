// Offsets in one arena for a known sequence of allocations (the step planner's packing), and the
// bound it is measured against.
//
// Policy (the whole of it):
//   - every size is rounded as the caching allocator rounds it (round_request in rounding.h:
//     512 B), so every offset is 512-byte aligned;
//   - two allocations overlap in time when begin_a < end_b and begin_b < end_a (an allocation made
//     at the moment another was freed may take its bytes);
//   - the bound: no packing can be smaller than the largest sum of live (rounded) bytes at any
//     moment, peak_live_bytes();
//   - packings are tried in this order, the smallest arena is kept, and the first within 0.1% of
//     the bound ends the planning:
//     1. greedy (Pisarchyk and Lee, "Efficient Memory Management for Deep Neural Net Inference",
//        2020): allocations are placed one by one, each into the smallest gap, among the already
//        placed allocations whose lifetimes overlap its own, that holds it, or above them all
//        when no gap does; in two orders: by size, largest first (their "greedy by size"), then
//        by size times lifetime, largest first (ties: the earlier first);
//     2. skyline best fit (after Sekiyama et al., "Profile-guided memory optimization for deep
//        neural networks", 2018): time is cut into slots at the distinct begin and end moments,
//        and the arena filled bottom-up. The skyline is, per slot, the top of what is placed
//        there. Each step takes the lowest run of slots of the skyline (the earliest when several
//        are lowest) and places on it, among the unplaced allocations whose slots all lie in the
//        run, the one of highest priority (ties: the earlier first); when none fits, the run is
//        raised to the lower of its two neighbours and those bytes stay unused. Six priorities,
//        with lifetime counted in slots: lifetime; size^(1/4), size^(1/2), size, size^2 times
//        lifetime; size alone;
//     3. the same skyline, 64 times, each allocation's priority multiplied by its own random
//        factor in [1, 2) (fixed seed, drawn from the generator's bits: the same plan every time
//        and on every machine), going through the six priorities in turn; in every other round of
//        six, the allocation placed is instead one whose slots start or end where the run does
//        (both best), by priority among those, so no sliver of the run is left to be raised.
//     On the 16 step traces that tests/train/step_planner_test.cpp plans (four models, f32 and
//     f16, with and without checkpointed blocks; the test asks 5%), the greedy orders are within
//     0.1% of the bound on 7 and the fixed skyline on the other 9, among them checkpointed
//     EfficientNet-B0, 8.5% or more above the bound by both greedy orders. The perturbed packings
//     are for traces where every fixed priority ties the same allocations the same wrong way: on
//     12,800 variants of those traces (5% or 15% of the allocations dropped, or 10% resized, or
//     10% outliving their frees a little) all but 5 are within 1% of the bound, none above 5%.
// Each packing is quadratic in the number of allocations in the worst case, and there are at most
// 72: a step of the zoo has a few thousand allocations, planned once (the 16 traces above in
// 3 ms or less each; under 100 ms on any of the variants).
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

// The same lifetimes on a dense clock: each moment replaced by its rank among the distinct
// moments of them all, which keeps the order of every begin and end (and so every overlap).
std::vector<Lifetime> on_dense_clock(std::vector<Lifetime> lifetimes);

}  // namespace frugal::memory
