// Out-of-memory recovery on the device (Note [Recovering from out of memory]): an OOM injected
// at every allocation of an f16 step in turn leaves weights, buffers, optimizer and scaler state
// bit-identical, and the retried step computes what a clean one does; under the caching
// allocator's cap a step is retried as micro-batches, then with checkpointing, and goes through.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/factory.h"
#include "gpu_test_util.h"
#include "memory/caching_allocator.h"
#include "memory/cuda_allocators.h"
#include "memory/oom_injection.h"
#include "optim/grad_scaler.h"
#include "train/oom_recovery.h"
#include "train/step_planner.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

using namespace frugal;

namespace {

using Snapshot = std::vector<std::pair<std::string, std::vector<double>>>;

struct GpuSetup {
  std::shared_ptr<nn::Sequential> net;
  std::unique_ptr<optim::SGD> opt;
  optim::GradScaler scaler{{.init_scale = 1024}};
  Tensor x, y;

  explicit GpuSetup(int64_t rows, int64_t side = 8) {
    manual_seed(11);
    net = train_test::tiny_cnn(16);
    net->to(Device::cuda(0));
    opt = std::make_unique<optim::SGD>(net->parameters(),
                                       optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
    Generator gen(5);
    x = randn({rows, side, side, 1}, gen).to(Device::cuda(0));
    std::vector<double> labels;
    for (int64_t i = 0; i < rows; ++i) labels.push_back(static_cast<double>(i % 4));
    y = from_vector(labels, {rows}, {.dtype = DType::i64, .device = Device::cuda(0)});
  }
  Tensor step(int64_t micro_batches = 1) {
    return train::train_step(*net, *opt, x, y, DType::f16, &scaler, 0.0, micro_batches);
  }
  Snapshot state() const {
    Snapshot s;
    for (const optim::NamedTensors& group :
         {net->state_dict(), opt->state_dict(), scaler.state_dict()}) {
      for (const auto& [name, t] : group) s.emplace_back(name, t.to_vector());
    }
    return s;
  }
};

}  // namespace

TEST(OomRecoveryGpu, AnOomAtEveryAllocationOfAStepLeavesTheStateBitIdentical) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  Snapshot clean;
  int64_t allocations = 0;
  {
    GpuSetup s(32);  // also runs cuDNN's algorithm search once, so later steps ask the same
    s.step();
  }
  {
    GpuSetup s(32);
    memory::InjectOom count(gpu, std::numeric_limits<int64_t>::max());
    train::run_undoable(*s.net, *s.opt, &s.scaler, [&] { return s.step(); });
    allocations = count.seen();
    clean = s.state();
  }
  ASSERT_GT(allocations, 20);
  int64_t failed = 0;
  for (int64_t k = 0; k < allocations; ++k) {
    GpuSetup s(32);
    const Snapshot before = s.state();
    {
      memory::InjectOom fail(gpu, k);
      EXPECT_THROW(train::run_undoable(*s.net, *s.opt, &s.scaler, [&] { return s.step(); }),
                   OutOfMemoryError);
      if (!fail.fired()) continue;
      ++failed;
    }
    ASSERT_EQ(s.state(), before) << "after an OOM at allocation " << k;
    s.step();
    ASSERT_EQ(s.state(), clean) << "the retry after an OOM at allocation " << k;
  }
  std::printf("[oom] %lld of %lld allocations of the step failed in turn, state bit-identical\n",
              static_cast<long long>(failed), static_cast<long long>(allocations));
  EXPECT_EQ(failed, allocations);
}

TEST(OomRecoveryGpu, UnderTheAllocatorsCapEveryRungIsTriedThenCheckpointingFits) {
  SKIP_WITHOUT_GPU();
  memory::CachingAllocator& alloc = memory::cuda_caching_allocator(0);
  // Free space left inside partly used segments (earlier tests of this process may leave some)
  // could serve the step without a new segment: make one 16-channel f16 activation of the batch
  // (128 KiB a 64x64 row) larger than all of it, so the whole step cannot fit.
  alloc.empty_cache();
  const int64_t slack =
      alloc.stats().reserved_bytes.current - alloc.stats().allocated_bytes.current;
  const int64_t rows = std::max<int64_t>(256, (slack / (128 << 10) + 64) / 64 * 64);
  GpuSetup s(rows, 64);
  s.step();
  const Snapshot before = s.state();
  alloc.empty_cache();
  // No cached segment is left and no new one may come: the whole step runs out of memory, and
  // smaller micro-batches run until one fits in the free space of the resident segments, or the
  // last rung (here: lifting the cap) lets the step through.
  alloc.set_memory_cap_bytes(static_cast<size_t>(alloc.stats().reserved_bytes.current));
  std::vector<std::string> log;
  bool asked = false;
  train::OomRecovery recovery({.enable_checkpointing =
                                   [&] {
                                     asked = true;
                                     alloc.set_memory_cap_bytes(0);
                                     return true;
                                   },
                               .log = [&](const std::string& l) { log.push_back(l); }});
  Tensor loss;
  try {
    loss = recovery.run(*s.net, *s.opt, &s.scaler, rows, [&](int64_t m) {
      EXPECT_EQ(s.state(), before) << "an attempt before " << m << " micro-batches changed state";
      return s.step(m);
    });
  } catch (...) {
    alloc.set_memory_cap_bytes(0);
    throw;
  }
  alloc.set_memory_cap_bytes(0);
  std::printf(
      "[oom] %lld rows under a cap at reserved (%.1f MiB free inside segments): %zu "
      "recoveries, last: %s\n",
      static_cast<long long>(rows), static_cast<double>(slack) / 1048576.0, log.size(),
      log.empty() ? "-" : log.back().c_str());
  // Some micro-batch size fits in what free space the resident segments have, or none does and
  // checkpointing is asked; either way the step went through after at least one failure.
  EXPECT_GE(recovery.recoveries(), 1);
  EXPECT_EQ(asked, recovery.checkpointing());
  if (!asked) {
    EXPECT_GE(recovery.micro_batches(), 2);
  }
  EXPECT_TRUE(std::isfinite(loss.item()));
}

// With the step planner, as train_epoch nests them: each attempt is a planned step of its own.
// The one that runs out of memory drops its plan, the retry in 2 micro-batches runs on the
// caching allocator and is recorded, and the steps after it follow the plan made from it.
TEST(OomRecoveryGpu, APlannedStepThatRunsOutOfMemoryIsRetriedAndPlannedAnew) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  GpuSetup s(64);
  train::StepPlanner planner(gpu);
  ASSERT_TRUE(planner.active());
  train::OomRecovery recovery({.log = [](const std::string&) {}});
  auto step_of = [&](int64_t m) {
    Tensor out;
    planner.run([&] { out = s.step(m); });
    return out;
  };
  auto step = [&] { return recovery.run(*s.net, *s.opt, &s.scaler, 64, step_of); };
  for (int i = 0; i < 3; ++i) step();
  ASSERT_TRUE(planner.report().last.followed()) << planner.report().str();
  {
    memory::InjectOom fail(gpu, 5);
    Tensor loss = step();
    EXPECT_TRUE(fail.fired());
    EXPECT_TRUE(std::isfinite(loss.item()));
  }
  EXPECT_EQ(recovery.recoveries(), 1);
  EXPECT_EQ(recovery.micro_batches(), 2);
  EXPECT_EQ(planner.report().dropped_after_oom, 1);
  for (int i = 0; i < 3; ++i) step();
  EXPECT_TRUE(planner.report().last.followed()) << planner.report().str();
  EXPECT_GT(planner.report().arena_bytes, 0u);
}
