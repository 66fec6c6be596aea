// The memory estimate of a training step (train/memory_estimate.h): on the CPU it is the
// allocator's measured peak exactly, meta predicts it but for kernel workspace, the breakdown adds
// up, and the largest batch under a budget is found.
#include "train/memory_estimate.h"

#include <gtest/gtest.h>

#include "core/factory.h"
#include "memory/allocator.h"
#include "memory/step_trace.h"
#include "models/registry.h"
#include "optim/optimizer.h"

using namespace frugal;

namespace {

train::MemoryEstimate run(Device device, const std::string& optimizer, int64_t* measured_peak) {
  memory::Allocator& alloc = memory::allocator_for(device);
  const int64_t base = alloc.stats().allocated_bytes.current;
  alloc.reset_peak_stats();
  auto model = models::create("mobilenet_v2", {.num_classes = 10, .width = 0.5});
  model->to(device);
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer == "sgd") {
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SgdOptions{.momentum = 0.9});
  } else {
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{});
  }
  train::MemoryEstimate e =
      train::estimate_memory(*model, *opt, Shape{4, 64, 64, 3}, 10, DType::f32, /*for_cuda=*/false);
  *measured_peak = alloc.stats().allocated_bytes.peak - base;
  return e;
}

}  // namespace

TEST(MemoryEstimate, TheCpuStepIsTheAllocatorsPeakAndMetaPredictsItButForWorkspace) {
  for (const char* opt_name : {"sgd", "adamw"}) {
    SCOPED_TRACE(opt_name);
    int64_t cpu_measured = 0, meta_measured = 0;
    train::MemoryEstimate cpu = run(Device::cpu(), opt_name, &cpu_measured);
    train::MemoryEstimate meta = run(Device::meta(), opt_name, &meta_measured);
    // Measured on the CPU, the estimate is the allocator's own peak (the second step's, with
    // optimizer state: the higher of the two).
    EXPECT_EQ(cpu.peak_allocated_bytes, cpu_measured);
    EXPECT_EQ(meta.peak_allocated_bytes, meta_measured);
    // Everything but kernel workspace is allocated alike on meta.
    EXPECT_EQ(cpu.before_bytes, meta.before_bytes);
    EXPECT_EQ(meta.at_peak.workspace, 0);
    EXPECT_LE(meta.peak_allocated_bytes, cpu.peak_allocated_bytes);
    EXPECT_LE(cpu.peak_allocated_bytes - meta.peak_allocated_bytes, cpu.at_peak.workspace);
  }
}

TEST(MemoryEstimate, TheBreakdownAddsUpToThePeak) {
  for (const char* opt_name : {"sgd", "adamw"}) {
    SCOPED_TRACE(opt_name);
    int64_t measured = 0;
    train::MemoryEstimate e = run(Device::meta(), opt_name, &measured);
    EXPECT_EQ(e.at_peak.total(), e.peak_allocated_bytes);
    auto model = models::create("mobilenet_v2", {.num_classes = 10, .width = 0.5});
    int64_t params = 0;
    for (const Tensor& p : model->parameters()) params += static_cast<int64_t>(p.nbytes());
    EXPECT_EQ(e.at_peak.parameters, params);
    // SGD keeps one momentum buffer per parameter, AdamW two moments and a step count (f32).
    const int64_t n_params = static_cast<int64_t>(model->parameters().size());
    EXPECT_EQ(e.at_peak.optimizer_state,
              std::string(opt_name) == "sgd" ? params : 2 * params + 4 * n_params);
    EXPECT_GT(e.at_peak.saved_activations, 0);
    EXPECT_GE(e.arena_bytes, e.arena_lower_bound);
  }
}

TEST(MemoryEstimate, CudaRoundingCountsEveryRequestAsTheCachingAllocatorDoes) {
  train::MemoryEstimate rounded =
      train::estimate_memory("mobilenet_v2", {.num_classes = 10}, Shape{2, 32, 32, 3}, DType::f16);
  EXPECT_EQ(rounded.peak_allocated_bytes % 512, 0);
  EXPECT_EQ(rounded.at_peak.total(), rounded.peak_allocated_bytes);
  EXPECT_EQ(rounded.phase == memory::Phase::forward || rounded.phase == memory::Phase::backward,
            true);
}

TEST(MemoryEstimate, LargestBatchFindsTheLastMultipleThatFits) {
  int calls = 0;
  auto peak = [&](int64_t n) {
    ++calls;
    return 1000 + 37 * n;  // bytes
  };
  // 1000 + 37 * n <= 20000: n <= 513.5, so 512 at granularity 16 and 513 at 1.
  EXPECT_EQ(train::largest_batch(peak, 20000, 16), 512);
  EXPECT_LT(calls, 20);
  EXPECT_EQ(train::largest_batch(peak, 20000, 1), 513);
  EXPECT_EQ(train::largest_batch(peak, 1000, 16), 0);
  EXPECT_EQ(train::largest_batch(peak, int64_t{1} << 40, 16, 1000), 992);
}

TEST(MemoryEstimate, EstimatingLeavesTheRandomStreamAlone) {
  manual_seed(12);
  default_generator().set_offset(34);
  train::estimate_memory("mobilenet_v2", {.num_classes = 10}, Shape{2, 32, 32, 3}, DType::f32);
  EXPECT_EQ(default_generator().seed(), 12u);
  EXPECT_EQ(default_generator().offset(), 34u);
}

TEST(MemoryEstimate, AnEstimateDoesNotDependOnWhatRanBefore) {
  // A checkpointed step recomputes blocks under their forward's autocast state; that must not
  // change how the next model's forward casts its parameters (Note [Lowering a forward's
  // parameters together]).
  const Shape input{4, 32, 32, 3};
  const int64_t first =
      train::estimate_memory("mobilenet_v2", {}, input, DType::f16).peak_allocated_bytes;
  train::estimate_memory("mobilenet_v2", {.checkpoint = models::CheckpointPolicy::parse("blocks")},
                         input, DType::f16);
  EXPECT_EQ(train::estimate_memory("mobilenet_v2", {}, input, DType::f16).peak_allocated_bytes,
            first);
}

// Note [Bounded conv workspace]: a dry run that predicts CUDA asks for each cuDNN convolution's
// bounded workspace where its call runs, released with it, so the plan places every one in its
// arena and the estimate counts them; a dry run for the CPU asks for none.
TEST(MemoryEstimate, ADryRunForCudaCountsAndPlansCudnnWorkspace) {
  auto conv_workspaces = [](bool for_cuda) {
    auto model = models::create("resnet18", {.num_classes = 10});
    model->to(Device::meta());
    optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
    return train::trace_step(*model, opt, Shape{16, 64, 64, 3}, 10, DType::f16, 2, for_cuda);
  };
  const memory::StepTrace cuda = conv_workspaces(true), cpu = conv_workspaces(false);
  int64_t asked = 0;
  for (const auto& a : cuda.allocations) {
    if (a.category != memory::Category::conv_workspace) continue;
    ++asked;
    EXPECT_GE(a.bytes, size_t{4} << 20);
    EXPECT_NE(a.end, memory::kStillLive);
  }
  // ResNet-18's 3x3 convs and strided 1x1 downsamples run cuDNN: forward, input and weight
  // gradients; so does its 7x7 stem, forward and weight gradient (rewritten in bf16 alone, Note
  // [Stride-2 stems as stride-1 convolutions]); its input gradient is not needed.
  EXPECT_GE(asked, 40);
  for (const auto& a : cpu.allocations) EXPECT_NE(a.category, memory::Category::conv_workspace);
  const memory::StepPlan plan = memory::plan_step(cuda);
  int64_t placed = 0;
  for (const auto& e : plan.entries) placed += e.in_arena ? 1 : 0;
  EXPECT_EQ(plan.entries.size(),
            memory::plan_step(cpu).entries.size() + static_cast<size_t>(asked));
  EXPECT_GE(placed, asked);

  // Counted as workspace where the peak falls inside a call; the breakdown still adds up.
  const train::MemoryEstimate e = train::estimate_memory(
      "resnet18", {.num_classes = 10}, Shape{16, 64, 64, 3}, DType::f16, "sgd", 1, true);
  EXPECT_EQ(e.at_peak.total(), e.peak_allocated_bytes);
}
