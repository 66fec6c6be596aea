// Planned steps (Note [Planned steps] in memory/step_trace.h) on a fake device: recording pairs
// allocations with releases, a replayed step is served from the arena at its planned offsets,
// a step that departs from its plan is served elsewhere where it departs and never collides, and
// arenas outlive their plan while a block lives in them.
#include <gtest/gtest.h>

#include <thread>

#include "memory/caching_allocator.h"
#include "memory/fake_device_source.h"
#include "memory/step_trace.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::memory::testing::addr_of;
using frugal::memory::testing::FakeDevice;

namespace {

// A step shaped like training: the forward keeps one tensor per layer and makes a transient
// beside each; the backward frees them in reverse while passing a gradient down, and leaves a
// parameter gradient alive after the step (freed by the next one, as zero_grad does).
struct FakeTraining {
  std::vector<size_t> sizes = {3 << 20, 5 << 20, 2 << 20, 700 << 10, 9000, 12 << 20};
  DataPtr param_grad;         // outlives the step
  std::vector<DataPtr> keep;  // saved tensors a test keeps past the step
  bool keep_one = false;
  bool zero_grad_first = false;  // free the last gradient before anything else, as train_step
  size_t scratch = 0;            // a kernel's workspace of this many bytes in each backward layer
  bool scratch_spans_gradient = false;  // ... still alive when the layer's gradient is made

  void step(CachingAllocator& a, bool check = false) {
    if (zero_grad_first) param_grad.reset();
    std::vector<DataPtr> saved;
    {
      PhaseScope fw(Phase::forward);
      for (size_t s : sizes) {
        DataPtr transient = a.allocate(s / 2 + 100);
        saved.push_back(a.allocate(s));
        if (check) a.check_invariants();
      }
    }
    PhaseScope bw(Phase::backward);
    param_grad.reset();
    DataPtr g = a.allocate(sizes.back());
    for (size_t i = sizes.size(); i-- > 0;) {
      DataPtr early;
      if (scratch_spans_gradient) {  // a staged result waiting while planned bytes are asked for
        ScratchScope kernel;
        CategoryScope tag(Category::workspace);
        early = a.allocate(scratch);
      }
      DataPtr gi = a.allocate(sizes[i]);
      early.reset();
      if (check) a.check_invariants();
      if (keep_one && i == 1) {
        keep.push_back(std::move(saved[i]));
      } else {
        saved[i].reset();
      }
      if (scratch > 0) {  // a kernel entry's workspace, released before it returns
        ScratchScope kernel;
        CategoryScope tag(Category::workspace);
        DataPtr ws = a.allocate(scratch);
        if (check) a.check_invariants();
      }
      g = std::move(gi);
    }
    param_grad = a.allocate(4096);
  }
};

StepPlan record_and_plan(FakeDevice& dev, FakeTraining& t) {
  StepRecorder rec(Device::cuda(0));
  t.step(dev.alloc);
  return plan_step(rec.finish());
}

}  // namespace

TEST(StepRecorder, PairsAllocationsWithReleasesAndKeepsItsThread) {
  FakeDevice dev;
  DataPtr earlier = dev.alloc.allocate(9000);
  StepRecorder rec(Device::cuda(0));
  earlier.reset();  // made before the recording: a release of its own kind
  DataPtr from_other;
  {
    PhaseScope fw(Phase::forward);
    DataPtr a = dev.alloc.allocate(1000);
    DataPtr b = dev.alloc.allocate(3000);
    std::thread([&] { from_other = dev.alloc.allocate(5000); }).join();
    a.reset();
    std::thread([&] { b.reset(); }).join();  // released elsewhere: still paired
  }
  DataPtr outlives = dev.alloc.allocate(7000);
  StepTrace trace = rec.finish();
  ASSERT_EQ(trace.allocations.size(), 3u);  // the other thread's allocation is not the step's
  EXPECT_EQ(trace.allocations[0].bytes, 1000u);
  EXPECT_EQ(trace.allocations[0].category, Category::forward);
  ASSERT_EQ(trace.earlier_releases.size(), 1u);
  EXPECT_EQ(trace.earlier_releases[0], (std::pair<int64_t, size_t>{0, 9000}));
  EXPECT_EQ(trace.allocations[0].begin, 1);
  EXPECT_EQ(trace.allocations[0].end, 3);
  EXPECT_EQ(trace.allocations[1].end, 4);
  EXPECT_EQ(trace.allocations[2].category, Category::resident);
  EXPECT_EQ(trace.allocations[2].end, kStillLive);
  EXPECT_EQ(trace.events, 6);  // the other thread's allocation and release are not counted
  EXPECT_TRUE(rec.finish().allocations.empty());
}

TEST(PlannedStep, AReplayIsServedFromTheArenaAtItsOffsets) {
  FakeDevice dev;
  FakeTraining t;
  t.step(dev.alloc);  // a first step outside the recording, as in training
  StepPlan plan = record_and_plan(dev, t);
  size_t in_arena = 0;
  for (const auto& e : plan.entries) in_arena += e.in_arena;
  EXPECT_EQ(plan.entries.size(), 3 * t.sizes.size() + 2);
  EXPECT_EQ(in_arena, plan.entries.size() - 1);  // all but the parameter gradient
  EXPECT_GE(plan.arena_bytes, plan.lower_bound);
  ASSERT_TRUE(dev.alloc.install_plan(plan));
  EXPECT_EQ(dev.alloc.arena_bytes(), plan.arena_bytes);
  dev.alloc.check_invariants();

  for (int s = 0; s < 3; ++s) {
    dev.alloc.reset_peak_stats();
    dev.alloc.begin_planned_step();
    t.step(dev.alloc, /*check=*/true);
    PlanReplay r = dev.alloc.end_planned_step();
    EXPECT_TRUE(r.followed());
    EXPECT_EQ(r.served, static_cast<int64_t>(in_arena));
    dev.alloc.check_invariants();
  }
  // Reserved: the arena plus the small segment of the parameter gradient.
  const MemoryStats st = dev.alloc.stats();
  EXPECT_EQ(st.reserved_bytes.peak, static_cast<int64_t>(plan.arena_bytes + kSmallSegmentBytes));
  int arenas = 0;
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) arenas += seg.arena;
  EXPECT_EQ(arenas, 1);
}

TEST(PlannedStep, AGradientTheNextStepFreesFirstIsCarriedInTheArena) {
  FakeDevice dev;
  FakeTraining t;
  t.zero_grad_first = true;
  t.step(dev.alloc);
  StepPlan plan = record_and_plan(dev, t);
  ASSERT_TRUE(plan.entries.back().carried);  // the parameter gradient, made last
  for (const auto& e : plan.entries) EXPECT_TRUE(e.in_arena);
  ASSERT_TRUE(dev.alloc.install_plan(plan));
  for (int s = 0; s < 3; ++s) {
    dev.alloc.begin_planned_step();
    t.step(dev.alloc, /*check=*/true);
    PlanReplay r = dev.alloc.end_planned_step();
    EXPECT_TRUE(r.followed()) << "step " << s;
    EXPECT_EQ(r.served, static_cast<int64_t>(plan.entries.size()));
    EXPECT_EQ(r.carried_at_end, 1);
    // Nothing allocated outside the arena: the gradient lives in it between steps.
    for (const SegmentSnapshot& seg : dev.alloc.snapshot()) {
      if (seg.arena) continue;
      for (const BlockSnapshot& b : seg.blocks) EXPECT_FALSE(b.allocated);
    }
  }
  dev.alloc.check_invariants();
}

TEST(PlannedStep, ACarriedGradientStillAliveIsNeverHandedOutAgain) {
  FakeDevice dev;
  FakeTraining t;
  t.zero_grad_first = true;
  t.step(dev.alloc);
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  dev.alloc.begin_planned_step();
  t.step(dev.alloc);
  dev.alloc.end_planned_step();
  DataPtr held = std::move(t.param_grad);  // accumulated into by the next step, not freed
  const uintptr_t at = addr_of(held);
  dev.alloc.begin_planned_step();
  t.step(dev.alloc, /*check=*/true);
  PlanReplay r = dev.alloc.end_planned_step();
  EXPECT_GE(r.occupied, 1);  // this step's gradient was planned where the held one lives
  EXPECT_NE(addr_of(t.param_grad), at);
  dev.alloc.check_invariants();  // includes: arena blocks never overlap
}

TEST(PlannedStep, KernelScratchTakesFreeArenaBytesInsteadOfASegment) {
  FakeDevice dev;
  FakeTraining t;
  t.scratch = 8192;  // after each layer's saved tensor is gone: a free run holds it
  t.step(dev.alloc);
  StepPlan plan = record_and_plan(dev, t);
  ASSERT_TRUE(dev.alloc.install_plan(plan));
  const int64_t segments = dev.alloc.stats().segment.current;
  dev.alloc.begin_planned_step();
  t.step(dev.alloc, /*check=*/true);  // invariants include: arena blocks never overlap
  PlanReplay r = dev.alloc.end_planned_step();
  EXPECT_TRUE(r.followed());
  EXPECT_EQ(r.scratch, static_cast<int64_t>(t.sizes.size()));
  EXPECT_EQ(r.scratch_elsewhere, 0);
  EXPECT_EQ(dev.alloc.stats().segment.current, segments);  // no segment cached for it
  // Scratch larger than any free run of the arena goes to the caching allocator, as before.
  t.scratch = plan.arena_bytes + (1 << 20);
  dev.alloc.begin_planned_step();
  t.step(dev.alloc, /*check=*/true);
  r = dev.alloc.end_planned_step();
  EXPECT_EQ(r.scratch, 0);
  EXPECT_EQ(r.scratch_elsewhere, static_cast<int64_t>(t.sizes.size()));
  EXPECT_TRUE(r.followed());
  dev.alloc.check_invariants();
}

TEST(PlannedStep, ScratchTheArenaCannotHoldGetsASegmentOfItsOwnSize) {
  FakeDevice dev;
  FakeTraining t;
  t.sizes = {64 << 10, 128 << 10};  // an arena far smaller than the scratch
  t.scratch = 3 << 20;              // would take a 20 MiB segment as a plain request
  t.step(dev.alloc);
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  dev.source->segment_sizes.clear();
  dev.alloc.begin_planned_step();
  t.step(dev.alloc, /*check=*/true);
  PlanReplay r = dev.alloc.end_planned_step();
  EXPECT_EQ(r.scratch_elsewhere, static_cast<int64_t>(t.sizes.size()));
  ASSERT_EQ(dev.source->segment_sizes.size(), 1u);  // one, reused by every layer
  EXPECT_EQ(dev.source->segment_sizes[0], size_t{4} << 20);
}

// Scratch of different sizes that no arena run holds shares one segment, sized by the largest:
// a re-plan gives the cache back, and the next step maps that one segment only.
TEST(PlannedStep, ScratchTheArenaCannotHoldSharesOneSegmentOfTheLargestSize) {
  FakeDevice dev;
  FakeTraining t;
  t.sizes = {64 << 10, 128 << 10};
  t.step(dev.alloc);
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  auto step_with_scratch = [&](std::initializer_list<size_t> sizes) {
    dev.alloc.begin_planned_step();
    for (size_t bytes : sizes) {
      ScratchScope kernel;
      DataPtr p = dev.alloc.allocate(bytes);  // released before the next kernel
    }
    return dev.alloc.end_planned_step();
  };
  PlanReplay r = step_with_scratch({6 << 20, 20 << 20});
  EXPECT_EQ(r.scratch_elsewhere, 2);
  dev.alloc.empty_cache();  // as a re-plan does
  dev.source->segment_sizes.clear();
  r = step_with_scratch({4 << 20, 6 << 20, 20 << 20});
  EXPECT_EQ(r.scratch_elsewhere, 3);
  ASSERT_EQ(dev.source->segment_sizes.size(), 1u);
  EXPECT_EQ(dev.source->segment_sizes[0], size_t{20} << 20);
  dev.alloc.check_invariants();
}

TEST(PlannedStep, ScratchKeepsClearOfThePlannedBytesAskedForWhileItLives) {
  FakeDevice dev;
  FakeTraining t;
  t.scratch = 8192;
  t.scratch_spans_gradient = true;
  t.step(dev.alloc);
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  for (int s = 0; s < 2; ++s) {
    dev.alloc.begin_planned_step();
    t.step(dev.alloc, /*check=*/true);
    PlanReplay r = dev.alloc.end_planned_step();
    EXPECT_EQ(r.occupied, 0);  // the gradient's planned bytes were never under the scratch
    EXPECT_TRUE(r.followed());
    EXPECT_GT(r.scratch, 0);
  }
}

TEST(PlannedStep, ScratchOutsideAPlannedStepOrOffItsThreadIsNotPlaced) {
  FakeDevice dev;
  FakeTraining t;
  t.step(dev.alloc);
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  ScratchScope kernel;
  CategoryScope tag(Category::workspace);
  DataPtr outside = dev.alloc.allocate(4096);
  dev.alloc.begin_planned_step();
  DataPtr other;
  std::thread([&] {
    ScratchScope k;
    other = dev.alloc.allocate(4096);
  }).join();
  PlanReplay r = dev.alloc.end_planned_step();
  EXPECT_EQ(r.scratch, 0);
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) {
    if (!seg.arena) continue;
    for (const BlockSnapshot& b : seg.blocks) EXPECT_FALSE(b.allocated);
  }
}

TEST(PlannedStep, ACapturedPlannedStepTakesTheArenaAndTheArenaOutlivesItsPlanWhilePinned) {
  FakeDevice dev;
  FakeTraining t;
  t.step(dev.alloc);
  StepPlan plan = record_and_plan(dev, t);
  int64_t in_arena = 0;
  for (const auto& e : plan.entries) in_arena += e.in_arena;
  ASSERT_TRUE(dev.alloc.install_plan(plan));
  const uintptr_t pin = dev.alloc.pin_arena();
  ASSERT_NE(pin, 0u);
  constexpr StreamId kPool = StreamId{1} << 62;
  dev.alloc.open_private_pool(kPool);  // as a capture does
  dev.alloc.begin_planned_step();
  t.step(dev.alloc, /*check=*/true);
  PlanReplay r = dev.alloc.end_planned_step();
  dev.alloc.close_private_pool();
  EXPECT_EQ(r.served, in_arena);  // the plan served first, the pool only what it does not plan
  bool pool_holds_the_gradient = false;
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) {
    for (const BlockSnapshot& b : seg.blocks)
      pool_holds_the_gradient |= b.allocated && b.stream == kPool;
  }
  EXPECT_TRUE(pool_holds_the_gradient);  // the parameter gradient outlives the step
  const int frees = dev.source->free_calls;
  dev.alloc.remove_plan();  // a graph still replays in the arena: it stays
  EXPECT_EQ(dev.source->free_calls, frees);
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current >= static_cast<int64_t>(plan.arena_bytes),
            true);
  dev.alloc.unpin_arena(pin);  // the graph is gone
  EXPECT_EQ(dev.source->free_calls, frees + 1);
  t.param_grad.reset();
  dev.alloc.release_private_pool(kPool);
  dev.alloc.check_invariants();
}

TEST(PlannedStep, ADepartingStepIsServedElsewhereAndNeverCollides) {
  FakeDevice dev;
  FakeTraining t;
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  t.sizes = {4 << 20, 5 << 20, 1 << 20, 12 << 20, 7 << 20};  // another model
  dev.alloc.begin_planned_step();
  t.step(dev.alloc, /*check=*/true);  // invariants include: arena blocks never overlap
  PlanReplay r = dev.alloc.end_planned_step();
  EXPECT_FALSE(r.followed());
  EXPECT_GT(r.extra + r.skipped, 0);
  dev.alloc.check_invariants();
}

TEST(PlannedStep, BytesStillInUseAreNotHandedOutAgain) {
  FakeDevice dev;
  FakeTraining t;
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  t.keep_one = true;  // one saved tensor outlives the step, in the arena
  dev.alloc.begin_planned_step();
  t.step(dev.alloc);
  PlanReplay r = dev.alloc.end_planned_step();
  EXPECT_EQ(r.live_at_end, 1);
  const uintptr_t kept = addr_of(t.keep[0]);
  const size_t kept_size = t.sizes[1];
  t.keep_one = false;
  dev.alloc.begin_planned_step();
  t.step(dev.alloc, /*check=*/true);
  r = dev.alloc.end_planned_step();
  EXPECT_GE(r.occupied, 1);  // its offset was planned for this step's tensor too
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) {
    for (const BlockSnapshot& b : seg.blocks) {
      if (!b.allocated || seg.address + b.offset == kept) continue;
      const uintptr_t at = seg.address + b.offset;
      EXPECT_FALSE(at < kept + kept_size && kept < at + b.size);
    }
  }
}

// One planned step that keeps one of its tensors (t.keep) alive in the arena past the step.
void planned_step_keeping_one(FakeDevice& dev, FakeTraining& t) {
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  t.keep_one = true;
  dev.alloc.begin_planned_step();
  t.step(dev.alloc);
  dev.alloc.end_planned_step();
}

TEST(PlannedStep, AnArenaOutlivesItsPlanWhileABlockLivesInIt) {
  FakeDevice dev;
  FakeTraining t;
  planned_step_keeping_one(dev, t);
  const int frees = dev.source->free_calls;
  dev.alloc.remove_plan();
  EXPECT_FALSE(dev.alloc.has_plan());
  EXPECT_EQ(dev.source->free_calls, frees);  // still holding the kept tensor
  dev.alloc.check_invariants();
  t.keep.clear();
  EXPECT_EQ(dev.source->free_calls, frees + 1);
  dev.alloc.check_invariants();
}

// The last block of a retired arena is released from a DataPtr's destructor, which cannot
// throw: a failed free of the arena (a sticky CUDA error) is reported, not std::terminate.
TEST(PlannedStep, AFailedFreeOfARetiredArenaDoesNotEndTheProcess) {
  FakeDevice dev;
  FakeTraining t;
  planned_step_keeping_one(dev, t);
  dev.alloc.remove_plan();
  dev.source->fail_frees = true;
  const int64_t reserved = dev.alloc.stats().reserved_bytes.current;
  t.keep.clear();  // the retired arena's last block: its free throws inside release()
  EXPECT_LT(dev.alloc.stats().reserved_bytes.current, reserved);
  dev.source->fail_frees = false;
  dev.alloc.check_invariants();
}

TEST(PlannedStep, AnArenaOverTheCapIsRefused) {
  FakeDevice dev;
  FakeTraining t;
  StepPlan plan = record_and_plan(dev, t);
  dev.alloc.set_memory_cap_bytes(plan.arena_bytes / 2);
  EXPECT_FALSE(dev.alloc.install_plan(plan));
  EXPECT_FALSE(dev.alloc.has_plan());
  EXPECT_THROW(dev.alloc.begin_planned_step(), Error);
  dev.alloc.check_invariants();
}

TEST(PlannedStep, OtherThreadsAndCategoriesKeepTheCachingPath) {
  FakeDevice dev;
  FakeTraining t;
  ASSERT_TRUE(dev.alloc.install_plan(record_and_plan(dev, t)));
  dev.alloc.begin_planned_step();
  DataPtr resident = dev.alloc.allocate(t.sizes[0]);  // not a step's category
  DataPtr other;
  std::thread([&] {
    PhaseScope fw(Phase::forward);
    other = dev.alloc.allocate(t.sizes[0]);
  }).join();
  PlanReplay r = dev.alloc.end_planned_step();
  EXPECT_EQ(r.served, 0);
  EXPECT_EQ(r.extra, 0);
  for (const SegmentSnapshot& seg : dev.alloc.snapshot()) {
    if (!seg.arena) continue;
    for (const BlockSnapshot& b : seg.blocks) EXPECT_FALSE(b.allocated);
  }
}
