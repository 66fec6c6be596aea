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

namespace {

// A BatchNorm at 8x8 (its running statistics change in every forward), then one at 1x1, which a
// slice of one row cannot run ("expected more than 1 value per channel").
std::shared_ptr<nn::Sequential> net_with_batch_norm_at_one_pixel() {
  manual_seed(3);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(4));
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::BatchNorm2d>(4));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(4, 4));
  return net;
}

}  // namespace

// The ladder doubles micro-batches up to one row a slice; where that is too small for the model
// the error used to end the run (exit 1) with BatchNorm's running statistics half-updated, and
// the checkpointing rung was never tried. Now the failed attempt is undone like an out-of-memory
// one and recovery moves on to checkpointing; the step then equals a clean step.
TEST(OomRecovery, SlicesTooSmallForTheModelMoveOnToCheckpointing) {
  Generator gen(5);
  const Tensor x = randn({4, 8, 8, 1}, gen);
  const Tensor y = from_vector({0, 1, 2, 3}, {4}, {.dtype = DType::i64});
  auto clean = net_with_batch_norm_at_one_pixel();
  optim::SGD clean_opt(clean->parameters(), {.lr = 0.1, .momentum = 0.9});
  train::train_step(*clean, clean_opt, x, y, DType::f32, nullptr, 0.0, 1);

  auto net = net_with_batch_norm_at_one_pixel();
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<std::string> log;
  bool checkpointing = false;
  train::OomRecovery recovery({.enable_checkpointing =
                                   [&] {
                                     checkpointing = true;
                                     return true;
                                   },
                               .log = [&](const std::string& l) { log.push_back(l); }});
  std::vector<int64_t> tried;
  Tensor loss = recovery.run(*net, opt, nullptr, 4, [&](int64_t m) {
    tried.push_back(m);
    // Out of memory until the slices are one row each, which the model cannot run.
    if (!checkpointing && m < 4) throw OutOfMemoryError("simulated: the step does not fit");
    return train::train_step(*net, opt, x, y, DType::f32, nullptr, 0.0, m);
  });
  EXPECT_EQ(tried, (std::vector<int64_t>{1, 2, 4, 1}));
  EXPECT_TRUE(recovery.checkpointing());
  EXPECT_EQ(recovery.micro_batches(), 1);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_NE(log[2].find("a step of 4 rows as 4 micro-batches cannot run (batch_norm"),
            std::string::npos)
      << log[2];
  EXPECT_NE(log[2].find("retrying with checkpointing"), std::string::npos) << log[2];
  EXPECT_TRUE(std::isfinite(loss.item()));
  expect_identical(train_test::snapshot(*net, opt, nullptr),
                   train_test::snapshot(*clean, clean_opt, nullptr), "after the recovered step");

  // Any other error passes as it is, even at micro-batches recovery chose: one after the
  // optimizer step (fire_after_optimizer's) must be neither undone nor retried.
  train::OomRecovery raised(
      {.enable_checkpointing = [] { return true; }, .log = [](const std::string&) {}});
  EXPECT_THROW(raised.run(*net, opt, nullptr, 4,
                          [&](int64_t m) -> Tensor {
                            if (m < 2) throw OutOfMemoryError("simulated");
                            FRUGAL_FAIL("after the optimizer step");
                          }),
               Error);
  EXPECT_FALSE(raised.checkpointing());
  EXPECT_EQ(raised.micro_batches(), 2);

  // At the run's own micro-batches the error is the user's, as without recovery.
  train::OomRecovery plain({.log = [](const std::string&) {}}, 4);
  EXPECT_THROW(plain.run(*net, opt, nullptr, 4,
                         [&](int64_t m) {
                           return train::train_step(*net, opt, x, y, DType::f32, nullptr, 0.0, m);
                         }),
               Error);
  EXPECT_FALSE(plain.checkpointing());
}
