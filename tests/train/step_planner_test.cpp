// The step planner (train/step_planner.h): its lifecycle on a fake device (record, plan, replay,
// re-plan, give up), and the plans of the zoo's training steps, made from dry runs on meta: within
// 5% of their bound (issue 12's arena goal), and the meta trace equal to the CPU's, so a plan
// made before the first step is the plan of the step that runs.
#include "train/step_planner.h"

#include <gtest/gtest.h>

#include "core/factory.h"
#include "memory/allocator.h"
#include "memory/fake_device_source.h"
#include "memory/oom_injection.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "train/memory_estimate.h"

using namespace frugal;
using frugal::memory::testing::FakeDevice;

namespace {

// A training-shaped step of layers of `sizes` bytes on `a` (see tests/memory/planned_step_test).
// `zero_grad_first`: the last step's gradient goes before anything is allocated, as
// train_step's zero_grad does; otherwise when the backward begins.
void fake_step(memory::CachingAllocator& a, const std::vector<size_t>& sizes,
               memory::DataPtr& param_grad, bool zero_grad_first = false) {
  if (zero_grad_first) param_grad.reset();
  std::vector<memory::DataPtr> saved;
  {
    memory::PhaseScope fw(memory::Phase::forward);
    for (size_t s : sizes) {
      memory::DataPtr transient = a.allocate(s / 3);
      saved.push_back(a.allocate(s));
    }
  }
  memory::PhaseScope bw(memory::Phase::backward);
  param_grad.reset();
  memory::DataPtr g = a.allocate(sizes.back());
  for (size_t i = sizes.size(); i-- > 0;) {
    memory::DataPtr gi = a.allocate(sizes[i]);
    saved[i].reset();
    g = std::move(gi);
  }
  param_grad = a.allocate(1 << 20);
}

memory::StepTrace meta_trace(const std::string& name, int64_t batch, DType precision,
                             models::CheckpointPolicy checkpoint = {},
                             Device device = Device::meta(), bool for_cuda = true,
                             int64_t side = 64, int64_t classes = 10) {
  auto model = models::create(name, {.num_classes = classes, .checkpoint = checkpoint});
  model->to(device);
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  return train::trace_step(*model, opt, Shape{batch, side, side, 3}, classes, precision, 2,
                           for_cuda);
}

}  // namespace

TEST(StepPlanner, RecordsThePlainStepThenReplaysIt) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  ASSERT_TRUE(planner.active());
  memory::DataPtr grad;
  const std::vector<size_t> sizes = {8 << 20, 4 << 20, 6 << 20, 1 << 20};
  for (int s = 0; s < 4; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad); });
  const train::PlannerReport& r = planner.report();
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.planned_steps, 3);
  EXPECT_EQ(r.replans, 0);
  EXPECT_TRUE(r.last.followed());
  EXPECT_GT(r.last.served, 0);
  EXPECT_GE(r.arena_bytes, r.lower_bound);
  // A small synthetic step; the zoo's 5% goal is tested below on real steps.
  EXPECT_LE(static_cast<double>(r.arena_bytes), 1.25 * static_cast<double>(r.lower_bound));
  EXPECT_NE(r.str().find("arena"), std::string::npos);
  dev.alloc.check_invariants();
}

TEST(StepPlanner, CarriesGradientsInTheArenaAndTrimsTheCacheWhenItSettles) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  memory::DataPtr grad;
  const std::vector<size_t> sizes = {8 << 20, 4 << 20, 6 << 20, 1 << 20};
  for (int s = 0; s < 4; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad, true); });
  const train::PlannerReport& r = planner.report();
  EXPECT_EQ(r.replans, 0);
  EXPECT_TRUE(r.last.followed());
  EXPECT_EQ(r.last.carried_at_end, 1);  // the gradient, in the arena until the next zero_grad
  // The unplanned first step's gradient sat in a cached segment of its own: given back when the
  // plan settled, so reserved is the arena alone.
  EXPECT_EQ(r.trimmed_bytes, memory::kSmallSegmentBytes);
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, static_cast<int64_t>(r.arena_bytes));
  EXPECT_NE(r.str().find("given back"), std::string::npos);
  dev.alloc.check_invariants();
}

TEST(StepPlanner, RePlansFromAStepThatDeparts) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  memory::DataPtr grad;
  std::vector<size_t> sizes = {8 << 20, 4 << 20, 6 << 20};
  for (int s = 0; s < 3; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad); });
  sizes = {2 << 20, 9 << 20, 3 << 20, 5 << 20};  // the step changed for good
  for (int s = 0; s < 3; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad); });
  const train::PlannerReport& r = planner.report();
  EXPECT_EQ(r.replans, 1);  // step 4 departed and was recorded (the plan had settled: step 5 is)
  EXPECT_TRUE(r.last.followed());
  EXPECT_FALSE(r.gave_up);
  dev.alloc.check_invariants();
}

TEST(StepPlanner, GivesUpOnStepsThatNeverRepeat) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc, {.max_replans = 2});
  memory::DataPtr grad;
  for (int s = 0; s < 6; ++s) {
    const std::vector<size_t> sizes = {static_cast<size_t>(s + 1) << 20, 3 << 20};
    planner.run([&] { fake_step(dev.alloc, sizes, grad); });
  }
  EXPECT_TRUE(planner.report().gave_up);
  EXPECT_FALSE(planner.settling());  // nothing to wait for
  EXPECT_FALSE(dev.alloc.has_plan());
  // Steps run unplanned from now on: a plan offered later would only keep its arena reserved.
  EXPECT_FALSE(
      planner.plan(meta_trace("mobilenet_v1", 2, DType::f32, {}, Device::meta(), true, 32)));
  EXPECT_FALSE(dev.alloc.has_plan());
  dev.alloc.check_invariants();
}

TEST(StepPlanner, AFailingStepClosesItsPlannedStep) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  memory::DataPtr grad;
  const std::vector<size_t> sizes = {8 << 20, 4 << 20};
  planner.run([&] { fake_step(dev.alloc, sizes, grad); });
  EXPECT_THROW(planner.run([] { throw std::runtime_error("step failed"); }), std::runtime_error);
  planner.run([&] { fake_step(dev.alloc, sizes, grad); });  // not "a planned step is running"
  dev.alloc.check_invariants();
}

// A planned step that runs out of memory drops its plan: the arena goes once the failed step's
// gradient does (zero_grad), and the retry, in another shape (micro-batches), is recorded and
// planned anew instead of departing from a plan whose arena sat idle beside it.
TEST(StepPlanner, AStepThatRunsOutOfMemoryDropsItsPlan) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  memory::DataPtr grad;
  const std::vector<size_t> sizes = {8 << 20, 4 << 20, 6 << 20};
  for (int s = 0; s < 3; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad, true); });
  ASSERT_TRUE(dev.alloc.has_plan());
  const size_t arena = dev.alloc.arena_bytes();
  EXPECT_THROW(planner.run([&] {
    memory::InjectOom fail(Device::cuda(0), 3);  // the fake device's name
    fake_step(dev.alloc, sizes, grad, true);
  }),
               OutOfMemoryError);
  EXPECT_FALSE(dev.alloc.has_plan());
  EXPECT_EQ(planner.report().dropped_after_oom, 1);
  EXPECT_NE(planner.report().str().find("1 plans dropped after out-of-memory"), std::string::npos)
      << planner.report().str();
  grad.reset();             // the failed step's gradients go (run_undoable's zero_grad)
  dev.alloc.empty_cache();  // OomRecovery's, before its retry
  EXPECT_EQ(dev.alloc.stats().reserved_bytes.current, 0) << "the arena of " << arena << " bytes";
  const std::vector<size_t> halves = {4 << 20, 2 << 20, 3 << 20};
  const int64_t planned_before = planner.report().planned_steps;
  for (int s = 0; s < 3; ++s) planner.run([&] { fake_step(dev.alloc, halves, grad, true); });
  const train::PlannerReport& r = planner.report();
  EXPECT_EQ(r.planned_steps, planned_before + 2);  // recorded, then planned
  EXPECT_TRUE(r.last.followed());
  EXPECT_GT(r.arena_bytes, 0u);
  dev.alloc.check_invariants();
}

TEST(StepPlanner, DoesNothingWithoutACachingAllocator) {
  train::StepPlanner planner(Device::cpu());
  EXPECT_FALSE(planner.active());
  int ran = 0;
  planner.run([&] { ran++; });
  EXPECT_EQ(ran, 1);
  EXPECT_FALSE(planner.plan(meta_trace("mobilenet_v2", 2, DType::f32)));
}

TEST(StepPlanner, TheMetaTraceIsTheCpuTrace) {
  // The plan made before the first step (from meta) is the plan of the step that runs: the same
  // plannable requests in the same order. f32 only: the CPU computes f16/bf16 through f32 copies
  // a GPU does not make (tests/gpu compares meta with CUDA in f16).
  for (DType p : {DType::f32}) {
    memory::StepPlan meta =
        memory::plan_step(meta_trace("mobilenet_v2", 2, p, {}, Device::meta(), /*for_cuda=*/false));
    memory::StepPlan cpu = memory::plan_step(meta_trace("mobilenet_v2", 2, p, {}, Device::cpu()));
    ASSERT_EQ(meta.entries.size(), cpu.entries.size());
    for (size_t i = 0; i < meta.entries.size(); ++i) {
      ASSERT_EQ(meta.entries[i].bytes, cpu.entries[i].bytes) << "entry " << i;
      ASSERT_EQ(meta.entries[i].in_arena, cpu.entries[i].in_arena) << "entry " << i;
    }
    EXPECT_EQ(meta.arena_bytes, cpu.arena_bytes);
  }
}

// At the goal's size: batch 128 of 3x224x224 for 1000 classes, as bench/RESULTS.md measures it.
// (Much smaller steps weigh the parameter gradients, carried in the arena to the end of the step,
// against little activation memory: checkpointed MobileNetV2 at batch 32 of 64x64 packs 5.8-7%
// above its bound.)
TEST(StepPlanner, ZooArenasAreWithinFivePercentOfTheirBound) {
  for (const std::string& name : models::names()) {
    for (DType p : {DType::f32, DType::f16}) {
      for (const char* ckpt : {"none", "blocks"}) {
        memory::StepPlan plan = memory::plan_step(meta_trace(
            name, 128, p, models::CheckpointPolicy::parse(ckpt), Device::meta(), true, 224, 1000));
        ASSERT_GT(plan.lower_bound, 0u) << name;
        const double ratio = static_cast<double>(plan.arena_bytes) / plan.lower_bound;
        EXPECT_GE(ratio, 1.0);
        EXPECT_LE(ratio, 1.05) << name << " " << p << " checkpoint " << ckpt;
      }
    }
  }
}
TEST(StepPlanner, PlanningBeforeTheFirstStepLeavesTheRandomStreamAlone) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  manual_seed(31);
  default_generator().set_offset(4096);
  EXPECT_TRUE(train::plan_before_first_step(planner, "mobilenet_v2", {.num_classes = 10},
                                            Shape{2, 32, 32, 3}, DType::f32));
  EXPECT_TRUE(dev.alloc.has_plan());
  EXPECT_GT(dev.alloc.arena_bytes(), 0u);
  EXPECT_EQ(default_generator().seed(), 31u);
  EXPECT_EQ(default_generator().offset(), 4096u);
}

TEST(StepPlanner, ARePlanThatFitsKeepsTheArena) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  memory::DataPtr grad;
  std::vector<size_t> sizes = {8 << 20, 4 << 20, 6 << 20};
  for (int s = 0; s < 3; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad); });
  auto arena_address = [&] {
    for (const memory::SegmentSnapshot& seg : dev.alloc.snapshot()) {
      if (seg.arena) return seg.address;
    }
    return uintptr_t{0};
  };
  const uintptr_t arena = arena_address();
  const size_t arena_bytes = dev.alloc.arena_bytes();
  sizes = {8 << 20, 4 << 20, 5 << 20};  // a step that needs a little less
  for (int s = 0; s < 3; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad); });
  EXPECT_EQ(planner.report().replans, 1);
  EXPECT_TRUE(planner.report().last.followed());
  EXPECT_EQ(arena_address(), arena);  // the same arena serves the new plan
  EXPECT_EQ(dev.alloc.arena_bytes(), arena_bytes);
  dev.alloc.check_invariants();
}

TEST(StepPlanner, AFirstStepPlannedApartThenTheStepsAfter) {
  // The first step of a run makes one more transient (a lazy cast, say) than the later ones; a
  // plan for each, made in advance, is followed from the first step on.
  auto first = [](memory::CachingAllocator& a, memory::DataPtr& grad) {
    memory::PhaseScope fw(memory::Phase::forward);
    memory::DataPtr lazy = a.allocate(3 << 20);
    fake_step(a, {8 << 20, 4 << 20}, grad);
  };
  auto later = [](memory::CachingAllocator& a, memory::DataPtr& grad) {
    fake_step(a, {8 << 20, 4 << 20}, grad);
  };
  std::vector<memory::StepTrace> traces;
  {
    FakeDevice rehearsal;
    memory::DataPtr grad;
    for (int s = 0; s < 2; ++s) {
      memory::StepRecorder rec(Device::cuda(0));
      (s == 0 ? first : later)(rehearsal.alloc, grad);
      traces.push_back(rec.finish());
    }
  }
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  ASSERT_TRUE(planner.plan(traces));
  EXPECT_TRUE(planner.settling());  // plans queued: a graph capture would wait
  memory::DataPtr grad;
  planner.run([&] { first(dev.alloc, grad); });
  EXPECT_TRUE(planner.report().last.followed());
  for (int s = 0; s < 3; ++s) {
    planner.run([&] { later(dev.alloc, grad); });
    EXPECT_TRUE(planner.report().last.followed()) << "step " << s + 2;
  }
  EXPECT_EQ(planner.report().replans, 0);
  EXPECT_EQ(planner.report().planned_steps, 4);
  EXPECT_FALSE(planner.settling());  // the steps repeat their plan
  dev.alloc.check_invariants();
}

// A re-plan that needs much less than the arena in force keeps it while it holds the last step's
// gradient (a second arena beside it would take room a capped step needs): the report says the
// arena the run reserves, where it showed the small plan's and hid the rest.
TEST(StepPlanner, TheReportShowsTheArenaInForce) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  memory::DataPtr grad;
  std::vector<size_t> sizes = {40 << 20, 4 << 20, 6 << 20};
  for (int s = 0; s < 3; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad, true); });
  const size_t large = dev.alloc.arena_bytes();
  sizes = {8 << 20, 4 << 20, 6 << 20};
  for (int s = 0; s < 5; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad, true); });
  const train::PlannerReport& r = planner.report();
  EXPECT_TRUE(r.last.followed());
  EXPECT_EQ(dev.alloc.arena_bytes(), large);
  EXPECT_EQ(r.arena_bytes, large);
  dev.alloc.check_invariants();
}

// A re-plan that needs a larger arena than the one in force, under a cap that holds the new arena
// but not both while the old one still holds the last step's gradient: the next step runs
// unplanned and is planned again. The planner used to give up for the rest of the run.
TEST(StepPlanner, ALargerRePlanThatFitsOnlyAloneIsPlannedAfterTheNextStep) {
  FakeDevice dev;
  train::StepPlanner planner(dev.alloc);
  memory::DataPtr grad;
  std::vector<size_t> sizes = {8 << 20, 4 << 20, 6 << 20};
  for (int s = 0; s < 3; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad, true); });
  const size_t small = dev.alloc.arena_bytes();
  sizes = {24 << 20, 4 << 20, 6 << 20};
  size_t large = 0;
  {  // the larger plan's arena, measured on a device of its own
    FakeDevice probe;
    train::StepPlanner p(probe.alloc);
    memory::DataPtr g;
    for (int s = 0; s < 3; ++s) p.run([&] { fake_step(probe.alloc, sizes, g, true); });
    large = probe.alloc.arena_bytes();
  }
  ASSERT_GT(large, small);
  // Not both arenas at once; the steps themselves fit.
  dev.alloc.set_memory_cap_bytes(large + small - (1 << 20));
  for (int s = 0; s < 6; ++s) planner.run([&] { fake_step(dev.alloc, sizes, grad, true); });
  const train::PlannerReport& r = planner.report();
  EXPECT_FALSE(r.gave_up);
  EXPECT_TRUE(dev.alloc.has_plan());
  EXPECT_EQ(dev.alloc.arena_bytes(), large);
  EXPECT_TRUE(r.last.followed());
  dev.alloc.set_memory_cap_bytes(0);
  dev.alloc.check_invariants();
}
