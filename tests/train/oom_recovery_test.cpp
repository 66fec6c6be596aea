// Out-of-memory recovery (Note [Recovering from out of memory]) on the CPU: an OOM injected at
// every allocation of a step in turn leaves weights, buffers, optimizer and scaler state
// bit-identical, and the step run again afterwards gives exactly the clean step's result; under
// a cap, a step is retried as micro-batches, then with checkpointing, and the choice sticks.
#include "train/oom_recovery.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/factory.h"
#include "memory/allocator.h"
#include "memory/oom_injection.h"
#include "optim/grad_scaler.h"
#include "step_fixtures.h"
#include "train/trainer.h"
#include "train_test_util.h"

using namespace frugal;

namespace {

using train_test::expect_identical;
using train_test::Snapshot;

// One training setup, the same every time it is made.
struct TrainSetup {
  std::shared_ptr<nn::Sequential> net;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::GradScaler> scaler;
  Tensor x, y;
  DType precision;

  TrainSetup(bool adamw, DType p, int64_t rows = 16) : precision(p) {
    manual_seed(11);
    net = train_test::tiny_cnn(16);
    if (adamw) {
      opt = std::make_unique<optim::AdamW>(net->parameters(), optim::AdamWOptions{.lr = 0.01});
    } else {
      opt = std::make_unique<optim::SGD>(net->parameters(),
                                         optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
    }
    if (p == DType::f16)
      scaler = std::make_unique<optim::GradScaler>(optim::GradScalerOptions{.init_scale = 1024});
    Generator gen(5);
    x = randn({rows, 8, 8, 1}, gen);
    std::vector<double> labels;
    for (int64_t i = 0; i < rows; ++i) labels.push_back(static_cast<double>(i % 4));
    y = from_vector(labels, {rows}, {.dtype = DType::i64});
  }
  Tensor step(int64_t micro_batches = 1) {
    return train::train_step(*net, *opt, x, y, precision, scaler.get(), 0.0, micro_batches);
  }
  Tensor undoable_step() {
    return train::run_undoable(*net, *opt, scaler.get(), [&] { return step(); });
  }
  Snapshot state() const { return train_test::snapshot(*net, *opt, scaler.get()); }
  train_test::SavedState save() const { return train_test::save(*net, *opt, scaler.get()); }
  void restore(const train_test::SavedState& saved) {
    train_test::restore(saved, *net, *opt, scaler.get());
  }
};

// train_test::oom_at_every_allocation on the tiny CNN.
void oom_at_every_allocation(bool adamw, DType precision, int warm_steps) {
  train_test::oom_at_every_allocation(
      Device::cpu(), [&] { return std::make_unique<TrainSetup>(adamw, precision); }, warm_steps);
}

struct CpuCap {
  explicit CpuCap(size_t bytes) { memory::cpu_allocator().set_memory_cap_bytes(bytes); }
  ~CpuCap() { memory::cpu_allocator().set_memory_cap_bytes(0); }
};

}  // namespace

TEST(OomRecovery, AnOomAnywhereInTheFirstF16StepLeavesEverythingAsItWas) {
  // The first step makes the momentum buffers and the scaler's state lazily.
  oom_at_every_allocation(/*adamw=*/false, DType::f16, 0);
}

TEST(OomRecovery, AnOomAnywhereInALaterAdamWStepLeavesEverythingAsItWas) {
  oom_at_every_allocation(/*adamw=*/true, DType::f32, 1);
}

TEST(OomRecovery, AnOomAnywhereInTheFirstAdamWStepLeavesEverythingAsItWas) {
  oom_at_every_allocation(/*adamw=*/true, DType::f32, 0);
}

TEST(OomRecovery, UnderACapTheStepIsRetriedAsMicroBatchesAndTheChoiceSticks) {
  TrainSetup s(false, DType::f32, 64);
  s.step();  // optimizer state made; what stays between steps is allocated now
  auto& cpu = memory::cpu_allocator();
  const int64_t base = cpu.stats().allocated_bytes.current;
  cpu.reset_peak_stats();
  s.step();
  const int64_t extra = cpu.stats().allocated_bytes.peak - base;
  std::vector<std::string> log;
  train::OomRecovery recovery({.log = [&](const std::string& l) { log.push_back(l); }});
  {
    CpuCap cap(static_cast<size_t>(base + extra * 7 / 10));
    Tensor loss = recovery.run(*s.net, *s.opt, nullptr, 64, [&](int64_t m) { return s.step(m); });
    EXPECT_TRUE(std::isfinite(loss.item()));
    EXPECT_GE(recovery.micro_batches(), 2);
    EXPECT_GE(recovery.recoveries(), 1);
    ASSERT_FALSE(log.empty());
    EXPECT_NE(log[0].find("retrying as 2 micro-batches"), std::string::npos) << log[0];
    const int64_t recovered = recovery.recoveries();
    recovery.run(*s.net, *s.opt, nullptr, 64, [&](int64_t m) { return s.step(m); });
    EXPECT_EQ(recovery.recoveries(), recovered) << "the micro-batches did not stick";
  }
  EXPECT_FALSE(recovery.checkpointing());
}

TEST(OomRecovery, WhenOneRowDoesNotFitItTurnsCheckpointingOnOrGivesUp) {
  TrainSetup s(false, DType::f32, 8);
  s.step();
  const int64_t base = memory::cpu_allocator().stats().allocated_bytes.current;
  std::vector<std::string> log;
  auto quiet = [&](const std::string& l) { log.push_back(l); };
  {
    auto cap = std::make_unique<CpuCap>(static_cast<size_t>(base + 64));  // nothing fits
    const Snapshot before = s.state();
    train::OomRecovery without({.log = quiet});
    EXPECT_THROW(without.run(*s.net, *s.opt, nullptr, 8, [&](int64_t m) { return s.step(m); }),
                 OutOfMemoryError);
    EXPECT_EQ(without.micro_batches(), 8);
    EXPECT_NE(log.back().find("nothing left to try"), std::string::npos) << log.back();
    expect_identical(s.state(), before, "after giving up");

    // Checkpointing is the last rung; here it "frees" memory by lifting the cap.
    bool asked = false;
    train::OomRecovery with({.enable_checkpointing =
                                 [&] {
                                   asked = true;
                                   cap.reset();
                                   return true;
                                 },
                             .log = quiet});
    Tensor loss = with.run(*s.net, *s.opt, nullptr, 8, [&](int64_t m) { return s.step(m); });
    EXPECT_TRUE(asked);
    EXPECT_TRUE(with.checkpointing());
    EXPECT_EQ(with.micro_batches(), 1);
    EXPECT_TRUE(std::isfinite(loss.item()));
  }
}

TEST(OomRecovery, TrainEpochRecoversAndGoesOn) {
  manual_seed(2);
  auto net = train_test::tiny_cnn(16);
  auto loader = train_test::tiny_loader(128, 64);
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  train::OomRecovery recovery({.log = [](const std::string&) {}});
  // A first epoch uncapped measures the step; the second runs under 70% of its extra bytes.
  auto& cpu = memory::cpu_allocator();
  train::train_epoch(*net, opt, nullptr, *loader, 0, {.progress = [](const train::Progress&) {}});
  const int64_t base = cpu.stats().allocated_bytes.current;
  const int64_t peak = cpu.stats().allocated_bytes.peak;
  CpuCap cap(static_cast<size_t>(base + (peak - base) * 7 / 10));
  train::EpochStats st =
      train::train_epoch(*net, opt, nullptr, *loader, 1,
                         {.progress = [](const train::Progress&) {}, .oom_recovery = &recovery});
  EXPECT_EQ(st.samples, 128);
  EXPECT_TRUE(std::isfinite(st.loss));
  EXPECT_GE(recovery.micro_batches(), 2);
  EXPECT_LE(st.peak_allocated, base + (peak - base) * 7 / 10);
}

TEST(OomRecovery, AnOomAfterTheOptimizerStepIsNotRetried) {
  TrainSetup s(false, DType::f32);
  train::StepCallbacks cb;
  int calls = 0;
  cb.add(train::StepPoint::after_optimizer, [&](const train::StepInfo&) {
    ++calls;
    throw OutOfMemoryError("a callback ran out of memory");
  });
  train::OomRecovery recovery({.log = [](const std::string&) {}});
  try {
    recovery.run(*s.net, *s.opt, nullptr, 16, [&](int64_t m) {
      return train::train_step(*s.net, *s.opt, s.x, s.y, DType::f32, nullptr, 0.0, m, &cb);
    });
    FAIL() << "expected an error";
  } catch (const OutOfMemoryError&) {
    FAIL() << "an OOM after the step was taken must not look retryable";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("after_optimizer"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls, 1);  // the step was taken once
  EXPECT_EQ(recovery.recoveries(), 0);
}
