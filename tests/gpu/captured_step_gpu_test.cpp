// CapturedStep on the device: replayed steps do what the same eager steps do (dropout masks,
// BatchNorm counts, GradScaler skips), a step that cannot be captured leaves the model alone,
// and the graph's private pool goes back to the allocator with it. Tests that compare two runs
// use deterministic mode, so cuDNN's algorithms are the same whatever the timing (sanitizers).
#include <gtest/gtest.h>

#include <cmath>

#include "base/deterministic.h"
#include "core/factory.h"
#include "core/ops.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "gpu_test_util.h"
#include "memory/caching_allocator.h"
#include "memory/oom_injection.h"
#include "models/registry.h"
#include "nn/functional.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/captured_step.h"
#include "train/precision_compare.h"
#include "train/step_planner.h"
#include "train/trainer.h"

using namespace frugal;

namespace {

const Device kGpu = Device::cuda(0);

// Everything a step changes: parameters and buffers, as host values.
std::vector<std::vector<double>> state_of(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.to_vector());
  for (const auto& [name, b] : m.named_buffers()) out.push_back(b.to_vector());
  return out;
}

double max_rel_diff(const std::vector<std::vector<double>>& a,
                    const std::vector<std::vector<double>>& b) {
  double worst = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a[t].size(); ++i) {
      num += (a[t][i] - b[t][i]) * (a[t][i] - b[t][i]);
      den += b[t][i] * b[t][i];
    }
    worst = std::max(worst, std::sqrt(num) / (std::sqrt(den) + 1e-6));
  }
  return worst;
}

Tensor batch_images(int k) {
  Generator g(100 + static_cast<uint64_t>(k));
  return randn({16, 32, 32, 1}, g, {.device = kGpu});
}

Tensor batch_labels(int k) {
  std::vector<double> v(16);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>((i * 7 + static_cast<size_t>(k)) % 10);
  return from_vector(v, {16}, {.dtype = DType::i64, .device = kGpu});
}

// MobileNetV2 for 1x32x32 inputs and 10 classes, seeded, on the GPU in training mode.
std::shared_ptr<nn::Module> small_mobilenet(uint64_t seed,
                                            models::CheckpointPolicy checkpoint = {}) {
  manual_seed(seed);
  auto model = models::create("mobilenet_v2",
                              {.num_classes = 10, .in_channels = 1, .checkpoint = checkpoint});
  model->to(kGpu);
  model->train();
  return model;
}

struct StepsRun {
  int64_t reserved = 0;       // the run's own, at its end (the cache emptied before it)
  int64_t pool_reserved = 0;  // of that, in private pools' blocks
  size_t arena = 0;           // the planner's arena, when planned
  train::PlannerReport planner;
  std::vector<double> losses;
  std::vector<std::vector<double>> state;
  uint64_t generator_offset = 0;
  double scale = 0;
  int64_t replays = 0;
};

// `steps` training steps of MobileNetV2 (dropout included) on batches 0..steps-1, eagerly or
// through a CapturedStep, from the same seed and generator offset.
// `planned`: through a step planner, planned before the first step (the capture in its arena).
StepsRun train_steps(DType precision, bool captured, int steps,
                     models::CheckpointPolicy checkpoint = {}, bool planned = false) {
  auto& alloc = dynamic_cast<memory::CachingAllocator&>(memory::allocator_for(kGpu));
  alloc.empty_cache();
  const int64_t reserved_before = alloc.stats().reserved_bytes.current;
  auto model = small_mobilenet(21, checkpoint);
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  std::unique_ptr<optim::GradScaler> scaler = optim::scaler_for(precision);
  Tensor images = Tensor::empty({16, 32, 32, 1}, {.device = kGpu});
  Tensor labels = Tensor::empty({16}, {.dtype = DType::i64, .device = kGpu});
  auto step_fn = [&] {
    return train::train_step(*model, opt, images, labels, precision, scaler.get());
  };
  train::StepPlanner planner(planned ? kGpu : Device::cpu());
  if (planned) {
    EXPECT_TRUE(train::plan_before_first_step(
        planner, "mobilenet_v2", {.num_classes = 10, .in_channels = 1, .checkpoint = checkpoint},
        Shape{16, 32, 32, 1}, precision));
  }
  train::CapturedStep step(kGpu, step_fn, {.warmup = 2, .planner = &planner});
  StepsRun run;
  for (int k = 0; k < steps; ++k) {
    copy_(images, batch_images(k));
    copy_(labels, batch_labels(k));
    Tensor loss;
    if (captured) {
      loss = step();
    } else {
      planner.run([&] { loss = step_fn(); });
    }
    run.losses.push_back(loss.item());
  }
  run.reserved = alloc.stats().reserved_bytes.current - reserved_before;
  for (const memory::SegmentSnapshot& seg : alloc.snapshot()) {
    for (const memory::BlockSnapshot& b : seg.blocks) {  // lent blocks of cached segments too
      if (!seg.arena && b.stream != memory::kDefaultStream) {
        run.pool_reserved += static_cast<int64_t>(b.size);
      }
    }
  }
  run.arena = alloc.arena_bytes();
  run.planner = planner.report();
  run.state = state_of(*model);
  run.generator_offset = default_generator().offset();
  run.scale = scaler ? scaler->get_scale() : 1.0;
  run.replays = step.replays();
  return run;
}

}  // namespace

TEST(CapturedStepGpu, DropoutDrawsTheEagerMasksOnEveryReplay) {
  SKIP_WITHOUT_GPU();
  Tensor x = ones({4096}, {.device = kGpu});
  default_generator().set_offset(777);
  std::vector<std::vector<double>> eager;
  for (int k = 0; k < 5; ++k) eager.push_back(nn::functional::dropout(x, 0.5, true).to_vector());
  const uint64_t eager_end = default_generator().offset();

  default_generator().set_offset(777);
  train::CapturedStep step(kGpu, [&] { return nn::functional::dropout(x, 0.5, true); },
                           {.warmup = 1});
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(step().to_vector(), eager[static_cast<size_t>(k)]) << "call " << k;
  }
  EXPECT_TRUE(step.captured());
  EXPECT_EQ(step.replays(), 4);
  EXPECT_EQ(default_generator().offset(), eager_end);
  EXPECT_NE(eager[2], eager[3]);  // the replays did not repeat one mask
}

TEST(CapturedStepGpu, TrainingReplaysMatchEagerSteps) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard same_algorithms;
  for (DType precision : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(precision));
    const uint64_t offset = default_generator().offset();
    StepsRun eager = train_steps(precision, false, 6);
    default_generator().set_offset(offset);
    StepsRun graphed = train_steps(precision, true, 6);
    EXPECT_EQ(graphed.replays, 4);
    for (size_t k = 0; k < eager.losses.size(); ++k) {
      EXPECT_NEAR(graphed.losses[k], eager.losses[k], 1e-3 * std::abs(eager.losses[k]))
          << "step " << k;
    }
    EXPECT_NE(graphed.losses[2], graphed.losses[3]);  // new batches reach the replays
    // Same kernels on the same data, cuDNN's algorithms fixed by deterministic mode.
    EXPECT_LT(max_rel_diff(graphed.state, eager.state), 1e-3);
    EXPECT_EQ(graphed.generator_offset, eager.generator_offset);
    EXPECT_EQ(graphed.scale, eager.scale);
    // num_batches_tracked is the last buffer of every BatchNorm: 6 steps counted exactly.
    EXPECT_EQ(graphed.state.back(), std::vector<double>{6.0});
  }
}

// Note [Captured steps in the arena]: a planned capture takes the step's memory from the
// planner's arena, so the replays train as the eager planned steps do and reserve what they do,
// with only the loss and the optimizer's few transients in the graph's private pool.
TEST(CapturedStepGpu, PlannedReplaysLiveInTheArenaAndTrainLikeEagerPlannedSteps) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard same_algorithms;
  for (DType precision : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(precision));
    const uint64_t offset = default_generator().offset();
    StepsRun eager = train_steps(precision, false, 12, {}, /*planned=*/true);
    default_generator().set_offset(offset);
    StepsRun graphed = train_steps(precision, true, 12, {}, /*planned=*/true);
    ASSERT_GE(graphed.replays, 4);  // captured once the planner settled
    EXPECT_FALSE(graphed.planner.gave_up);
    EXPECT_EQ(graphed.arena, eager.arena);
    for (size_t k = 0; k < eager.losses.size(); ++k) {
      EXPECT_NEAR(graphed.losses[k], eager.losses[k], 1e-3 * std::abs(eager.losses[k]))
          << "step " << k;
    }
    EXPECT_LT(max_rel_diff(graphed.state, eager.state), 1e-3);
    EXPECT_EQ(graphed.generator_offset, eager.generator_offset);
    // No second copy of the step: the pool holds a few MiB (the loss, the scratch the arena
    // cannot hold), borrowed from the cache the eager steps left, so a replayed step reserves no
    // more than an eager planned one (Note [Private pools for captured graphs]).
    EXPECT_LE(graphed.pool_reserved, 6 << 20);
    EXPECT_LE(graphed.reserved, eager.reserved);
    std::printf(
        "[captured in the arena] %s: reserved %.1f MiB replayed (pool %.1f) against "
        "%.1f eager, arena %.1f MiB\n",
        dtype_name(precision), graphed.reserved / 1048576.0, graphed.pool_reserved / 1048576.0,
        eager.reserved / 1048576.0, static_cast<double>(graphed.arena) / 1048576.0);
  }
}

// Note [Checkpointing] under capture: the replayed forward inside backward draws the same
// dropout masks (the generator is set back to offsets relative to the capture) and counts the
// BatchNorm statistics once, replay after replay.
TEST(CapturedStepGpu, CheckpointedReplaysMatchEagerSteps) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard same_algorithms;
  const models::CheckpointPolicy blocks = models::CheckpointPolicy::parse("blocks");
  const uint64_t offset = default_generator().offset();
  StepsRun eager = train_steps(DType::f16, false, 6, blocks);
  default_generator().set_offset(offset);
  StepsRun graphed = train_steps(DType::f16, true, 6, blocks);
  default_generator().set_offset(offset);
  StepsRun plain = train_steps(DType::f16, false, 6);
  EXPECT_EQ(graphed.replays, 4);
  for (size_t k = 0; k < eager.losses.size(); ++k) {
    EXPECT_NEAR(graphed.losses[k], eager.losses[k], 1e-3 * std::abs(eager.losses[k])) << k;
    EXPECT_NEAR(plain.losses[k], eager.losses[k], 1e-3 * std::abs(eager.losses[k])) << k;
  }
  EXPECT_LT(max_rel_diff(graphed.state, eager.state), 1e-3);
  EXPECT_LT(max_rel_diff(plain.state, eager.state), 1e-3);
  EXPECT_EQ(graphed.generator_offset, plain.generator_offset);
  EXPECT_EQ(graphed.state.back(), std::vector<double>{6.0});
}

TEST(CapturedStepGpu, AnOverflowingReplayIsSkippedOnTheDevice) {
  SKIP_WITHOUT_GPU();
  auto model = small_mobilenet(5);
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::GradScaler scaler;
  Tensor images = batch_images(0), labels = batch_labels(0);
  train::CapturedStep step(
      kGpu, [&] { return train::train_step(*model, opt, images, labels, DType::f16, &scaler); });
  for (int k = 0; k < 4; ++k) step();
  ASSERT_TRUE(step.captured());
  const double scale = scaler.get_scale();
  std::vector<std::vector<double>> params;
  for (const auto& [name, p] : model->named_parameters()) params.push_back(p.to_vector());
  const optim::NamedTensors momentum = opt.state_dict();
  std::vector<std::vector<double>> momentum_before;
  for (const auto& [name, t] : momentum) momentum_before.push_back(t.to_vector());

  fill_(images, INFINITY);
  step();
  EXPECT_EQ(scaler.get_scale(), scale * 0.5);
  size_t i = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    EXPECT_EQ(p.to_vector(), params[i++]) << name << " changed in a skipped step";
  }
  i = 0;
  for (const auto& [name, t] : opt.state_dict()) {
    EXPECT_EQ(t.to_vector(), momentum_before[i++]) << name << " changed in a skipped step";
  }
  copy_(images, batch_images(1));
  step();
  EXPECT_NE(model->named_parameters()[0].second.to_vector(), params[0]);  // clean again
}

TEST(CapturedStepGpu, AStepThatReadsBackFailsToCaptureAndChangesNothing) {
  SKIP_WITHOUT_GPU();
  auto model = small_mobilenet(6);
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  Tensor images = batch_images(0), labels = batch_labels(0);
  auto& alloc = dynamic_cast<memory::CachingAllocator&>(memory::allocator_for(kGpu));
  Tensor mask_input = ones({256}, {.device = kGpu});
  train::CapturedStep step(kGpu,
                           [&] {
                             Tensor loss = train::train_step(*model, opt, images, labels);
                             // Draws while capturing: a failed capture gives them back.
                             (void)nn::functional::dropout(mask_input, 0.5, true);
                             if (loss.item() > 1e9)
                               throw std::runtime_error("unreachable");  // a host read
                             return loss;
                           },
                           {.warmup = 1});
  step();
  std::vector<std::vector<double>> before = state_of(*model);
  const uint64_t offset = default_generator().offset();
  try {
    step();
    FAIL() << "a synchronising step was captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CapturedStep: capturing the step on cuda:0 failed"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(step.captured());
  EXPECT_EQ(state_of(*model), before);
  EXPECT_EQ(default_generator().offset(), offset);
  for (const memory::SegmentSnapshot& seg : alloc.snapshot()) {
    EXPECT_EQ(seg.stream, memory::kDefaultStream) << "a failed capture kept its pool";
  }
  alloc.check_invariants();
  // Eager steps still work after the failed capture.
  Tensor loss = train::train_step(*model, opt, images, labels);
  EXPECT_TRUE(std::isfinite(loss.item()));
}

// Out of memory while capturing stays an OutOfMemoryError: callers retry smaller on it, and
// `frugal train --graph` exits with 3 as for an eager step's.
TEST(CapturedStepGpu, OutOfMemoryWhileCapturingIsOutOfMemory) {
  SKIP_WITHOUT_GPU();
  Tensor x = ones({1 << 16}, {.device = kGpu});
  train::CapturedStep step(kGpu, [&] { return mul(add(x, 1.0), 2.0); }, {.warmup = 1});
  step();
  ASSERT_FALSE(step.next_call_is_eager());
  // Allocation 0 is the capture's random-offset counter, made before capturing; 1 is the step's.
  memory::InjectOom fail(kGpu, 1);
  try {
    step();
    FAIL() << "the injected out-of-memory error was lost";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("CapturedStep: capturing the step"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fail.fired());
  EXPECT_FALSE(step.captured());
}

TEST(CapturedStepGpu, ThePoolGoesBackToTheAllocatorWithTheStep) {
  SKIP_WITHOUT_GPU();
  auto& alloc = dynamic_cast<memory::CachingAllocator&>(memory::allocator_for(kGpu));
  Tensor x = ones({1 << 20}, {.device = kGpu});
  {
    train::CapturedStep step(kGpu, [&] { return mul(add(x, 1.0), 2.0); }, {.warmup = 1});
    EXPECT_EQ(step().to_vector()[5], 4.0);      // eager: its temporaries stay cached
    (void)zeros({64 << 20}, {.device = kGpu});  // and a 256 MiB segment with them
    const int64_t cached = alloc.stats().reserved_bytes.current;
    for (int k = 0; k < 2; ++k) EXPECT_EQ(step().to_vector()[5], 4.0);
    // The capture borrowed the eager temporaries' cached bytes, the smallest that fit, and the
    // 256 MiB segment it left whole went back after it.
    EXPECT_LT(alloc.stats().reserved_bytes.current, cached - (200 << 20));
    EXPECT_GE(step.graph_nodes(), 2);
    int pool_blocks = 0;
    for (const memory::SegmentSnapshot& seg : alloc.snapshot()) {
      for (const memory::BlockSnapshot& b : seg.blocks)
        pool_blocks += b.stream != memory::kDefaultStream;
    }
    EXPECT_GE(pool_blocks, 1);
    copy_(x, full({1 << 20}, 3.0, {.device = kGpu}));
    EXPECT_EQ(step().to_vector()[5], 8.0);  // the replay reads x's new values
  }
  for (const memory::SegmentSnapshot& seg : alloc.snapshot()) {
    EXPECT_EQ(seg.stream, memory::kDefaultStream);
    for (const memory::BlockSnapshot& b : seg.blocks) EXPECT_EQ(b.stream, memory::kDefaultStream);
  }
  alloc.check_invariants();
}

TEST(CapturedStepGpu, CompareWithGraphTrainsLikeEager) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard same_algorithms;
  train::CompareOptions o{.batch = 32,
                          .channels = 1,
                          .height = 32,
                          .width = 32,
                          .classes = 10,
                          .warmup = 3,
                          .steps = 5,
                          .device = kGpu};
  for (DType precision : {DType::f32, DType::f16}) {
    const train::CompareRow eager = train::run_precision(o, precision);
    o.graph = true;
    const train::CompareRow graphed = train::run_precision(o, precision);
    o.graph = false;
    EXPECT_EQ(graphed.first_loss, eager.first_loss) << dtype_name(precision);
    EXPECT_NEAR(graphed.loss, eager.loss, 1e-3 * std::abs(eager.loss)) << dtype_name(precision);
    EXPECT_EQ(graphed.loss_scale, eager.loss_scale);
  }
}

// train_epoch with EpochOptions::graph: the first batch eager, the second captured, the rest
// replayed, the last partial batch eager again, the learning rate halved every 2 steps; epoch by
// epoch it trains like the eager loop.
TEST(CapturedStepGpu, TrainEpochWithGraphTracksEager) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard same_algorithms;
  auto run = [](bool graph) {
    auto ds = std::make_shared<data::SyntheticDataset>(Shape{32, 32, 1}, 10, 88, 7);
    data::DataLoader loader(
        ds, {.batch_size = 32, .shuffle = true, .num_workers = 0, .seed = 1, .device = kGpu});
    auto model = small_mobilenet(9);
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    optim::StepLR sched(opt, 2, 0.5);  // replayed steps must see every new learning rate
    optim::GradScaler scaler;
    std::vector<double> losses;
    for (int e = 0; e < 3; ++e) {
      losses.push_back(train::train_epoch(*model, opt, &sched, loader, e,
                                          {.progress = [](const train::Progress&) {},
                                           .precision = DType::f16,
                                           .scaler = &scaler,
                                           .graph = graph})
                           .loss);
    }
    return losses;
  };
  const uint64_t offset = default_generator().offset();
  const std::vector<double> eager = run(false);
  default_generator().set_offset(offset);
  const std::vector<double> graphed = run(true);
  for (size_t e = 0; e < eager.size(); ++e) {
    EXPECT_NEAR(graphed[e], eager[e], 2e-3 * std::abs(eager[e])) << "epoch " << e;
  }
  EXPECT_LT(graphed.back(), graphed.front());
}
