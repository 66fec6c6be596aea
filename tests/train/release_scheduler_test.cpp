// The release scheduler (Note [Releasing cached memory]) over a caching allocator on a fake
// device: each policy's trigger, the cool-down, adaptive trimming to the recent peak, and no
// release outside safe points (inside a step's phase or while a graph is captured).
#include "train/release_scheduler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/caching_allocator.h"
#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::memory::testing::FakeDevice;
using train::ReleasePolicy;
using train::StepPoint;

namespace {

// Drives the scheduler as train_epoch's callbacks would: step_begin, the step's allocations
// (`peak` bytes live at once, then freed: they stay cached), step_end.
struct Driver {
  FakeDevice dev{size_t{1} << 30};
  std::vector<std::string> log;
  train::StepCallbacks cb;
  std::unique_ptr<train::ReleaseScheduler> sched;

  explicit Driver(const std::string& policy, int64_t capacity = 0) {
    sched = std::make_unique<train::ReleaseScheduler>(
        dev.alloc, ReleasePolicy::parse(policy),
        capacity > 0 ? std::function<int64_t()>([capacity] { return capacity; }) : nullptr,
        [this](const std::string& line) { log.push_back(line); });
    sched->attach(cb);
  }
  void step(std::vector<size_t> sizes) {
    cb.fire(StepPoint::step_begin);
    {
      std::vector<DataPtr> live;
      for (size_t s : sizes) live.push_back(dev.alloc.allocate(s));
    }
    cb.fire(StepPoint::step_end);
  }
  int64_t reserved() const { return dev.alloc.stats().reserved_bytes.current; }
};

constexpr int64_t kMiBi = int64_t{1} << 20;

}  // namespace

TEST(ReleasePolicy, ParsesEachPolicyAndRefusesOthers) {
  EXPECT_EQ(ReleasePolicy::parse("off").kind, ReleasePolicy::Kind::off);
  EXPECT_EQ(ReleasePolicy::parse("epoch").kind, ReleasePolicy::Kind::epoch);
  EXPECT_EQ(ReleasePolicy::parse("adaptive").kind, ReleasePolicy::Kind::adaptive);
  ReleasePolicy t = ReleasePolicy::parse("threshold:0.7");
  EXPECT_EQ(t.kind, ReleasePolicy::Kind::threshold);
  EXPECT_DOUBLE_EQ(t.fraction, 0.7);
  EXPECT_EQ(t.str(), "threshold:0.7");
  EXPECT_DOUBLE_EQ(ReleasePolicy::parse("threshold").fraction, 0.85);
  for (const char* bad : {"threshold:0", "threshold:1.5", "threshold:x", "sometimes", ""}) {
    try {
      ReleasePolicy::parse(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos);
    }
  }
}

TEST(ReleaseScheduler, RefusesAPolicyParseWouldNot) {
  FakeDevice dev;
  auto make = [&](ReleasePolicy p) { train::ReleaseScheduler s(dev.alloc, p); };
  EXPECT_THROW(make({.kind = ReleasePolicy::Kind::adaptive, .window_steps = 0}), Error);
  EXPECT_THROW(make({.kind = ReleasePolicy::Kind::adaptive, .margin = -0.1}), Error);
  EXPECT_THROW(make({.kind = ReleasePolicy::Kind::threshold, .fraction = 0}), Error);
  EXPECT_THROW(make({.kind = ReleasePolicy::Kind::threshold, .cooldown_steps = -1}), Error);
  EXPECT_NO_THROW(make({.kind = ReleasePolicy::Kind::adaptive, .window_steps = 1}));
}

TEST(ReleaseScheduler, EpochReleasesAtTheEpochsEndOnly) {
  Driver d("epoch");
  d.step({30 * kMiB});
  d.step({30 * kMiB});
  EXPECT_EQ(d.reserved(), 30 * kMiBi);  // cached across steps
  EXPECT_TRUE(d.sched->releases().empty());
  d.cb.fire(StepPoint::epoch_end);
  EXPECT_EQ(d.reserved(), 0);
  ASSERT_EQ(d.sched->releases().size(), 1u);
  EXPECT_EQ(d.sched->releases()[0].bytes, 30 * kMiBi);
  EXPECT_EQ(d.sched->releases()[0].point, StepPoint::epoch_end);
  ASSERT_EQ(d.log.size(), 1u);
  EXPECT_NE(d.log[0].find("released 30.0 MiB"), std::string::npos) << d.log[0];
}

TEST(ReleaseScheduler, ThresholdReleasesAboveItsFractionThenCoolsDown) {
  Driver d("threshold:0.5", 100 * kMiBi);
  d.step({40 * kMiB});  // 40 MiB reserved: under half of 100
  EXPECT_TRUE(d.sched->releases().empty());
  d.step({60 * kMiB});  // a second segment: 100 MiB reserved
  ASSERT_EQ(d.sched->releases().size(), 1u);
  EXPECT_EQ(d.sched->releases()[0].bytes, 100 * kMiBi);
  EXPECT_EQ(d.reserved(), 0);
  d.step({60 * kMiB});  // above again, but within the cool-down of 50 steps
  EXPECT_EQ(d.sched->releases().size(), 1u);
  EXPECT_EQ(d.reserved(), 60 * kMiBi);
}

TEST(ReleaseScheduler, ThresholdUsesTheAllocatorsCapBeforeTheDevice) {
  Driver d("threshold:0.5", 1000 * kMiBi);
  d.dev.alloc.set_memory_cap_bytes(100 * kMiB);
  d.step({60 * kMiB});  // 60% of the cap, 6% of the device
  EXPECT_EQ(d.sched->releases().size(), 1u);
}

TEST(ReleaseScheduler, AdaptiveGivesBackWhatTheRecentStepsDidNotUse) {
  Driver d("adaptive");
  // A larger first step leaves two 150 MiB segments cached; the steps after need 12 MiB, which
  // the first of them serves (best fit, lowest address).
  d.step({150 * kMiB, 150 * kMiB});
  for (int i = 0; i < 19; ++i) d.step({12 * kMiB});
  EXPECT_TRUE(d.sched->releases().empty());  // the large step is still in the window of 20
  d.step({12 * kMiB});
  ASSERT_EQ(d.sched->releases().size(), 1u);
  EXPECT_EQ(d.sched->releases()[0].bytes, 150 * kMiBi);  // the idle segment only
  EXPECT_EQ(d.reserved(), 150 * kMiBi);
  const int calls = d.dev.source->alloc_calls;
  for (int i = 0; i < 5; ++i) d.step({12 * kMiB});
  EXPECT_EQ(d.dev.source->alloc_calls, calls) << "a later step had to grow reserved again";
  EXPECT_EQ(d.sched->releases().size(), 1u);  // nothing idle is left to give back
}

TEST(ReleaseScheduler, NeverReleasesInsideAStepsPhaseOrACapture) {
  Driver d("epoch");
  d.step({30 * kMiB});
  {
    PhaseScope inside(Phase::backward);
    d.cb.fire(StepPoint::epoch_end);
  }
  EXPECT_EQ(d.reserved(), 30 * kMiBi);
  EXPECT_EQ(d.sched->refused_unsafe(), 1);
  d.dev.alloc.open_private_pool(77);  // a graph being captured
  d.cb.fire(StepPoint::epoch_end);
  EXPECT_EQ(d.reserved(), 30 * kMiBi);
  EXPECT_EQ(d.sched->refused_unsafe(), 2);
  d.dev.alloc.close_private_pool();
  d.cb.fire(StepPoint::epoch_end);
  EXPECT_EQ(d.reserved(), 0);
  // And the inner points never release, whatever the policy says.
  Driver t("threshold:0.01", 100 * kMiBi);
  t.cb.fire(StepPoint::step_begin);
  DataPtr a = t.dev.alloc.allocate(30 * kMiB);
  a.reset();
  for (StepPoint p :
       {StepPoint::after_forward, StepPoint::after_backward, StepPoint::after_optimizer}) {
    t.cb.fire(p);
  }
  EXPECT_EQ(t.reserved(), 30 * kMiBi);
  t.cb.fire(StepPoint::step_end);
  EXPECT_EQ(t.reserved(), 0);
}

TEST(ReleaseScheduler, ThresholdWithoutACapMeasuresAgainstTheDevicesTotal) {
  Driver d("threshold:0.5");  // no cap, no capacity given: the fake device's 1 GiB
  d.step({400 * kMiB});
  EXPECT_TRUE(d.sched->releases().empty());
  d.step({600 * kMiB});  // a second segment: 1000 MiB reserved, past half of 1024
  ASSERT_EQ(d.sched->releases().size(), 1u);
  EXPECT_NE(d.sched->releases()[0].reason.find("of 1024.0 MiB"), std::string::npos)
      << d.sched->releases()[0].reason;
}
