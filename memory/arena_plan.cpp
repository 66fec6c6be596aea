// Arena packing: greedy orders, then skyline best fit by fixed and perturbed priorities. The
// policy and its bound are stated in arena_plan.h.
#include "memory/arena_plan.h"

#include <algorithm>
#include <cmath>
#include <functional>
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

std::vector<Lifetime> on_dense_clock(std::vector<Lifetime> lifetimes) {
  std::vector<int64_t> moments;
  moments.reserve(2 * lifetimes.size());
  for (const Lifetime& l : lifetimes) {
    moments.push_back(l.begin);
    moments.push_back(l.end);
  }
  std::sort(moments.begin(), moments.end());
  moments.erase(std::unique(moments.begin(), moments.end()), moments.end());
  auto rank = [&](int64_t t) {
    return static_cast<int64_t>(std::lower_bound(moments.begin(), moments.end(), t) -
                                moments.begin());
  };
  for (Lifetime& l : lifetimes) {
    l.begin = rank(l.begin);
    l.end = rank(l.end);
  }
  return lifetimes;
}

namespace {

constexpr double kGoodEnough = 1.001;      // within 0.1% of the bound: no further packing tried
constexpr size_t kPerturbedPackings = 64;  // skyline packings with perturbed priorities, at most
constexpr size_t kNever = std::numeric_limits<size_t>::max();

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
    size_t best = kNever, best_gap = kNever, top = 0;
    for (const Placed& p : placed) {
      if (!(l.begin < p.end && p.begin < l.end)) continue;
      if (p.offset >= top + bytes && p.offset - top < best_gap) {
        best_gap = p.offset - top;
        best = top;
      }
      top = std::max(top, p.offset + p.bytes);
    }
    if (best == kNever) best = top;
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

// The lifetimes on a dense clock: slot t is the time between the t-th and (t+1)-th distinct
// moment, and an allocation occupies the slots [first, last). The skyline works per slot, and a
// lifetime's length in slots does not depend on which clock the trace used.
struct Slots {
  size_t count = 0;
  std::vector<size_t> first, last;  // per lifetime
};

Slots slots_of(const std::vector<Lifetime>& lifetimes) {
  Slots s;
  for (const Lifetime& l : on_dense_clock(lifetimes)) {
    s.first.push_back(static_cast<size_t>(l.begin));
    s.last.push_back(static_cast<size_t>(l.end));
    s.count = std::max(s.count, s.last.back());  // the last moment is an end
  }
  return s;
}

// How the skyline chooses among the allocations that fit in the lowest run.
enum class Choice {
  kByPriority,  // the highest priority
  kFlushFirst,  // one that starts or ends where the run does (both ends best), then by priority
};

// Skyline best fit (after Sekiyama et al., "Profile-guided memory optimization for deep neural
// networks", 2018): the arena is filled bottom-up. The skyline is the top of what is placed, per
// slot, kept as runs of slots at one level. Each step takes the lowest run and places there, on
// the skyline, an unplaced allocation whose slots lie within the run (chosen by `choice`); when
// none fits, the run is raised to its lower neighbour (those bytes stay unused in the run). Unlike
// a fixed order, what is placed next depends on where the packing is lowest, so the allocations
// live at the peak end up side by side whatever their sizes; the priority decides which fills a
// low run first. Flush first leaves no sliver of the run on either side to be raised later, at
// the price of placing an allocation of lower priority first; neither choice packs better on all
// traces, so the perturbed packings use both.
class Skyline {
 public:
  Skyline(const std::vector<Lifetime>& lifetimes, const Slots& slots,
          const std::vector<double>& priority, Choice choice)
      : lifetimes_(lifetimes), slots_(slots), priority_(priority), choice_(choice) {
    unplaced_live_.assign(slots.count, 0);
    starting_.assign(slots.count, {});
    for (size_t i = 0; i < lifetimes.size(); ++i) {
      for (size_t t = slots.first[i]; t < slots.last[i]; ++t) ++unplaced_live_[t];
      starting_[slots.first[i]].push_back(i);
    }
    for (std::vector<size_t>& starts : starting_) {
      std::sort(starts.begin(), starts.end(), [&](size_t a, size_t b) { return before(a, b); });
    }
    runs_ = runs_over(0, slots.count, 0);
  }

  ArenaPlan pack() {
    ArenaPlan plan;
    plan.offsets.assign(lifetimes_.size(), 0);
    for (size_t placed = 0; placed < lifetimes_.size();) {
      const size_t run = lowest_run();
      const size_t pick = best_fitting(runs_[run].first, end_of(run));
      if (pick == kNever) {
        raise_to_lower_neighbour(run);
        continue;
      }
      place(pick, run, plan);
      ++placed;
    }
    return plan;
  }

 private:
  // A slot with nothing left to place is closed: never the lowest run, and a wall to a neighbour.
  static constexpr size_t kClosed = kNever;

  struct Run {
    size_t first;  // slot; the run ends where the next begins
    size_t level;  // or kClosed
  };

  bool before(size_t a, size_t b) const {
    return priority_[a] != priority_[b] ? priority_[a] > priority_[b] : a < b;
  }

  size_t end_of(size_t run) const {
    return run + 1 < runs_.size() ? runs_[run + 1].first : slots_.count;
  }

  // The runs of slots [first, last) once those of them with nothing left to place are closed and
  // the others are at `level`.
  std::vector<Run> runs_over(size_t first, size_t last, size_t level) const {
    std::vector<Run> runs;
    for (size_t t = first; t < last; ++t) {
      const size_t here = unplaced_live_[t] == 0 ? kClosed : level;
      if (runs.empty() || runs.back().level != here) runs.push_back({t, here});
    }
    return runs;
  }

  // Neighbouring runs at one level become one, among runs_[from, to) and their neighbours.
  void merge_equal_neighbours(size_t from, size_t to) {
    const size_t lo = from > 0 ? from - 1 : 0;
    for (size_t r = std::min(to, runs_.size() - 1); r > lo; --r) {
      if (runs_[r].level == runs_[r - 1].level) {
        runs_.erase(runs_.begin() + static_cast<std::ptrdiff_t>(r));
      }
    }
  }

  // The first run at the lowest level.
  size_t lowest_run() const {
    size_t lowest = 0;
    for (size_t r = 1; r < runs_.size(); ++r) {
      if (runs_[r].level < runs_[lowest].level) lowest = r;
    }
    return lowest;
  }

  // Slots [first, last) holding all of allocation i.
  bool inside(size_t i, size_t first, size_t last) const {
    return slots_.first[i] >= first && slots_.last[i] <= last;
  }

  int flush_ends(size_t i, size_t first, size_t last) const {
    return (slots_.first[i] == first ? 1 : 0) + (slots_.last[i] == last ? 1 : 0);
  }

  // The allocation to place in slots [first, last) by the choice, or kNever when none fits.
  size_t best_fitting(size_t first, size_t last) const {
    size_t best = kNever;
    auto better = [&](size_t a, size_t b) {
      if (choice_ == Choice::kFlushFirst) {
        const int fa = flush_ends(a, first, last), fb = flush_ends(b, first, last);
        if (fa != fb) return fa > fb;
      }
      return before(a, b);
    };
    for (size_t t = first; t < last; ++t) {
      for (size_t i : starting_[t]) {  // by priority: the first that fits is this slot's best...
        if (!inside(i, first, last)) continue;
        if (best == kNever || better(i, best)) best = i;
        // ...unless one further down ends flush with the run.
        if (choice_ == Choice::kByPriority || slots_.last[i] == last) break;
      }
    }
    return best;
  }

  void raise_to_lower_neighbour(size_t run) {
    const size_t left = run > 0 ? runs_[run - 1].level : kClosed;
    const size_t right = run + 1 < runs_.size() ? runs_[run + 1].level : kClosed;
    // Some unplaced allocation is live in the run and does not fit in it, so a neighbour is open.
    runs_[run].level = std::min(left, right);
    merge_equal_neighbours(run, run + 1);
  }

  // Places allocation i on the lowest run, `run`, which holds it: the run becomes what is left of
  // it on either side, and the allocation's slots rise to its top (or close).
  void place(size_t i, size_t run, ArenaPlan& plan) {
    const size_t level = runs_[run].level, first = runs_[run].first, last = end_of(run);
    const size_t top = level + round_request(lifetimes_[i].bytes);
    plan.offsets[i] = level;
    plan.arena_bytes = std::max(plan.arena_bytes, top);
    std::vector<size_t>& starts = starting_[slots_.first[i]];
    starts.erase(std::find(starts.begin(), starts.end(), i));
    for (size_t t = slots_.first[i]; t < slots_.last[i]; ++t) --unplaced_live_[t];
    // The run's slots on either side of the allocation stay open at its level.
    std::vector<Run> pieces;
    if (first < slots_.first[i]) pieces.push_back({first, level});
    for (const Run& r : runs_over(slots_.first[i], slots_.last[i], top)) pieces.push_back(r);
    if (slots_.last[i] < last) pieces.push_back({slots_.last[i], level});
    runs_.erase(runs_.begin() + static_cast<std::ptrdiff_t>(run));
    runs_.insert(runs_.begin() + static_cast<std::ptrdiff_t>(run), pieces.begin(), pieces.end());
    merge_equal_neighbours(run, run + pieces.size() + 1);
  }

  const std::vector<Lifetime>& lifetimes_;
  const Slots& slots_;
  const std::vector<double>& priority_;
  const Choice choice_;
  std::vector<Run> runs_;              // by slot
  std::vector<size_t> unplaced_live_;  // per slot: unplaced allocations live in it
  // Per slot: the unplaced allocations starting there, by priority.
  std::vector<std::vector<size_t>> starting_;
};

// The skyline's priorities, from longest-lived first to largest first: size^a x lifetime (in
// slots) for a = 0, 1/4, 1/2, 1, 2, then size alone. Which is best depends on the trace (on
// variants of the zoo's step traces with allocations dropped or resized, each of the six is the
// only best one on some), and a packing is cheap, so all are tried. Built from sqrt and products
// only: exactly rounded, so the same plan on every machine.
std::vector<std::vector<double>> skyline_priorities(const std::vector<Lifetime>& lifetimes,
                                                    const Slots& slots) {
  const size_t n = lifetimes.size();
  std::vector<std::vector<double>> priorities(6, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i) {
    const auto size = static_cast<double>(round_request(lifetimes[i].bytes));
    const auto length = static_cast<double>(slots.last[i] - slots.first[i]);
    priorities[0][i] = length;
    priorities[1][i] = std::sqrt(std::sqrt(size)) * length;
    priorities[2][i] = std::sqrt(size) * length;
    priorities[3][i] = size * length;
    priorities[4][i] = size * size * length;
    priorities[5][i] = size;
  }
  return priorities;
}

// `priority` with each allocation's scaled by its own factor in [1, 2). The factor comes from the
// generator's bits directly (not a std:: distribution, whose output the standard leaves to the
// library), so the plan is the same on every machine.
std::vector<double> perturbed(const std::vector<double>& priority, std::mt19937_64& rng) {
  std::vector<double> p(priority);
  for (double& x : p) x *= 1.0 + static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return p;
}

std::vector<size_t> sorted_by(const std::vector<Lifetime>& lifetimes,
                              const std::function<double(const Lifetime&)>& key) {
  std::vector<size_t> order(lifetimes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return key(lifetimes[a]) > key(lifetimes[b]); });
  return order;
}

// The packings of the policy (arena_plan.h), cheapest first, keeping the smallest and stopping at
// the first within 0.1% of the bound: greedy by size and by area, the skyline by each of its
// priorities, then by perturbed priorities. The perturbed ones are a randomized search: where
// every fixed priority orders the same allocations the same wrong way (typically a few small
// long-lived ones end up above the peak), some perturbations order them otherwise. Restarts
// rather than perturbing the best so far: on the variants of the zoo's traces that need them,
// perturbing the best priorities further left more of them above 1% of the bound.
ArenaPlan smallest_packing(const std::vector<Lifetime>& lifetimes, size_t bound) {
  ArenaPlan best;
  best.arena_bytes = kNever;
  auto keep_if_smaller = [&](ArenaPlan candidate) {
    if (candidate.arena_bytes < best.arena_bytes) best = std::move(candidate);
    return static_cast<double>(best.arena_bytes) <= kGoodEnough * static_cast<double>(bound);
  };
  const std::vector<size_t> by_size = sorted_by(
      lifetimes, [](const Lifetime& l) { return static_cast<double>(round_request(l.bytes)); });
  const std::vector<size_t> by_area = sorted_by(lifetimes, [](const Lifetime& l) {
    return static_cast<double>(round_request(l.bytes)) * static_cast<double>(l.end - l.begin);
  });
  for (const std::vector<size_t>* order : {&by_size, &by_area}) {
    if (keep_if_smaller(place_in_order(lifetimes, *order))) return best;
  }
  const Slots slots = slots_of(lifetimes);
  const std::vector<std::vector<double>> priorities = skyline_priorities(lifetimes, slots);
  for (const std::vector<double>& priority : priorities) {
    if (keep_if_smaller(Skyline(lifetimes, slots, priority, Choice::kByPriority).pack())) {
      return best;
    }
  }
  std::mt19937_64 rng(0x5eed);  // fixed: the same plan every time
  for (size_t k = 0; k < kPerturbedPackings; ++k) {
    const std::vector<double> priority = perturbed(priorities[k % priorities.size()], rng);
    // Each priority once by each choice per 12 packings.
    const Choice choice =
        (k / priorities.size()) % 2 == 0 ? Choice::kByPriority : Choice::kFlushFirst;
    if (keep_if_smaller(Skyline(lifetimes, slots, priority, choice).pack())) return best;
  }
  return best;
}

}  // namespace

ArenaPlan plan_arena(const std::vector<Lifetime>& lifetimes) {
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    FRUGAL_CHECK(lifetimes[i].begin < lifetimes[i].end, "plan_arena: allocation ", i, " ends (",
                 lifetimes[i].end, ") before it begins (", lifetimes[i].begin, ")");
  }
  if (lifetimes.empty()) return {};
  const size_t bound = peak_live_bytes(lifetimes);
  ArenaPlan plan = smallest_packing(lifetimes, bound);
  plan.lower_bound = bound;
  return plan;
}

}  // namespace frugal::memory
