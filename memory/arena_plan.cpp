// Greedy-by-size arena packing; the policy and its bound are stated in arena_plan.h.
#include "memory/arena_plan.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "base/error.h"

namespace frugal::memory {

size_t peak_live_bytes(const std::vector<Lifetime>& lifetimes) {
  // Sweep: at equal moments frees come first, the same rule as the overlap test.
  std::vector<std::pair<int64_t, int64_t>> events;  // (moment, +bytes | -bytes)
  events.reserve(2 * lifetimes.size());
  for (const Lifetime& l : lifetimes) {
    const auto b = static_cast<int64_t>(round_request(l.bytes));
    events.emplace_back(l.begin, b);
    events.emplace_back(l.end, -b);
  }
  std::sort(events.begin(), events.end());  // negative deltas sort before positive at a moment
  int64_t live = 0, peak = 0;
  for (const auto& [moment, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return static_cast<size_t>(peak);
}

namespace {

constexpr double kSearchAbove = 1.01;  // search only when greedy is over 1% above the bound
constexpr double kSearchUntil = 1.001;  // stop within 0.1% of the bound
constexpr int kSearchRounds = 400;
constexpr int kSearchPatience = 100;  // packings without a smaller arena before giving up
constexpr size_t kSearchLargest = 96;  // the allocations whose places the search swaps

// Places the lifetimes in `order`, each in the smallest gap that holds it among the placed ones it
// overlaps in time (or above them all). The placed ones are kept sorted by offset, so each
// placement walks them once instead of sorting those it overlaps (the parameter gradients, carried
// to the end of the step, overlap nearly everything: sorting was most of a packing's time).
ArenaPlan place_in_order(const std::vector<Lifetime>& lifetimes, const std::vector<size_t>& order) {
  ArenaPlan plan;
  plan.offsets.assign(lifetimes.size(), 0);
  struct Placed {
    size_t offset, bytes;
    int64_t begin, end;
  };
  std::vector<Placed> placed;  // by offset
  placed.reserve(lifetimes.size());
  for (size_t i : order) {
    const Lifetime& l = lifetimes[i];
    const size_t bytes = round_request(l.bytes);
    size_t best = std::numeric_limits<size_t>::max(), best_gap = best, top = 0;
    for (const Placed& p : placed) {
      if (!(l.begin < p.end && p.begin < l.end)) continue;
      if (p.offset >= top + bytes && p.offset - top < best_gap) {
        best_gap = p.offset - top;
        best = top;
      }
      top = std::max(top, p.offset + p.bytes);
    }
    if (best == std::numeric_limits<size_t>::max()) best = top;
    plan.offsets[i] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + bytes);
    const Placed here{best, bytes, l.begin, l.end};
    placed.insert(
        std::upper_bound(placed.begin(), placed.end(), here,
                         [](const Placed& a, const Placed& b) { return a.offset < b.offset; }),
        here);
  }
  return plan;
}

// Local search, when both greedy orders stay above the bound: swap a few of the largest
// allocations' places in the size order, keep a swap that gives a smaller arena, and stop at the
// bound (within 0.1%) or after kSearchRounds packings. The order of placement among the large ones is what a
// greedy packing gets wrong (checkpointed EfficientNet-B0: 8.7% above the bound by size and by
// area). A fixed seed keeps plans reproducible.
void search_orders(const std::vector<Lifetime>& lifetimes, std::vector<size_t> order,
                   ArenaPlan& best) {
  const size_t movable = std::min<size_t>(order.size(), kSearchLargest);
  if (movable < 2) return;
  std::mt19937_64 rng(0x5eed);
  std::uniform_int_distribution<size_t> pick(0, movable - 1), count(1, 4);
  const auto good_enough = static_cast<size_t>(kSearchUntil * static_cast<double>(best.lower_bound));
  int since_better = 0;
  for (int round = 0; round < kSearchRounds && best.arena_bytes > good_enough &&
                      since_better < kSearchPatience;
       ++round, ++since_better) {
    std::vector<size_t> trial = order;
    for (size_t k = count(rng); k > 0; --k) std::swap(trial[pick(rng)], trial[pick(rng)]);
    ArenaPlan p = place_in_order(lifetimes, trial);
    if (p.arena_bytes < best.arena_bytes) {
      p.lower_bound = best.lower_bound;
      best = std::move(p);
      order = std::move(trial);
      since_better = 0;
    }
  }
}

}  // namespace

ArenaPlan plan_arena(const std::vector<Lifetime>& lifetimes) {
  const size_t n = lifetimes.size();
  for (size_t i = 0; i < n; ++i) {
    FRUGAL_CHECK(lifetimes[i].begin < lifetimes[i].end, "plan_arena: allocation ", i, " ends (",
                 lifetimes[i].end, ") before it begins (", lifetimes[i].begin, ")");
  }
  auto sorted_by = [&](auto key) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return key(lifetimes[a]) > key(lifetimes[b]); });
    return order;
  };
  const std::vector<size_t> size_order =
      sorted_by([](const Lifetime& l) { return static_cast<double>(round_request(l.bytes)); });
  const std::vector<size_t> area_order = sorted_by([](const Lifetime& l) {
    return static_cast<double>(round_request(l.bytes)) * static_cast<double>(l.end - l.begin);
  });
  ArenaPlan by_size = place_in_order(lifetimes, size_order);
  ArenaPlan by_area = place_in_order(lifetimes, area_order);
  const bool area_first = by_area.arena_bytes < by_size.arena_bytes;
  ArenaPlan plan = area_first ? std::move(by_area) : std::move(by_size);
  plan.lower_bound = peak_live_bytes(lifetimes);
  // The search starts from the better greedy order, then from the other while still above.
  for (const std::vector<size_t>* order :
       {area_first ? &area_order : &size_order, area_first ? &size_order : &area_order}) {
    if (static_cast<double>(plan.arena_bytes) <=
        kSearchAbove * static_cast<double>(plan.lower_bound)) {
      break;
    }
    search_orders(lifetimes, *order, plan);
  }
  return plan;
}

}  // namespace frugal::memory
