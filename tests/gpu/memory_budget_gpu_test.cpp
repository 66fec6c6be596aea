// Budgets on the device (Note [Fitting a memory budget]; issue 12): a step chosen for a 4 GiB
// budget, planned, trains under the allocator capped at that budget (an OOM fails the test) and
// reserves no more than the budget. Written at the end of the sixth session with no device time
// left: not yet run on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/factory.h"
#include "gpu_test_util.h"
#include "memory/caching_allocator.h"
#include "memory/cuda_allocators.h"
#include "models/registry.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/memory_budget.h"
#include "train/step_planner.h"
#include "train/trainer.h"

using namespace frugal;

TEST(MemoryBudgetGpu, TheChosenStepRunsUnderTheBudgetItWasChosenFor) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  const int64_t budget = int64_t{4} << 30;
  memory::CachingAllocator& alloc = memory::cuda_caching_allocator(0);
  // 384 images of 224x224 need about 5.2 GiB as a plain f16 step: more than the budget.
  for (int64_t batch : {int64_t{384}, int64_t{768}}) {
    SCOPED_TRACE(batch);
    const Shape input{batch, 224, 224, 3};
    const models::ModelConfig base{};
    const train::BudgetChoice choice =
        train::choose_for_budget("mobilenet_v2", base, input, DType::f16, "sgd", budget);
    std::printf("[budget] batch %lld: %s\n", static_cast<long long>(batch), choice.str().c_str());
    ASSERT_TRUE(choice.fits) << choice.str();
    EXPECT_FALSE(choice.checkpoint.mode == models::CheckpointPolicy::Mode::none &&
                 choice.micro_batches == 1);

    alloc.empty_cache();
    alloc.reset_peak_stats();
    alloc.set_memory_cap_bytes(static_cast<size_t>(budget));
    int64_t peak_reserved = 0;
    {
      models::ModelConfig config = base;
      config.checkpoint = choice.checkpoint;
      auto model = models::create("mobilenet_v2", config);
      model->to(gpu);
      optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
      auto scaler = optim::scaler_for(DType::f16);
      Generator g(2);
      Tensor images = randn(input, g, {.device = gpu});
      Tensor labels = zeros({batch}, {.dtype = DType::i64, .device = gpu});
      train::StepPlanner planner(gpu);
      train::plan_before_first_step(planner, "mobilenet_v2", config, input, DType::f16,
                                    choice.micro_batches);
      for (int s = 0; s < 4; ++s) {
        Tensor loss;
        planner.run([&] {
          loss = train::train_step(*model, opt, images, labels, DType::f16, scaler.get(), 0.0,
                                   choice.micro_batches);
        });
        EXPECT_TRUE(std::isfinite(loss.item()));
      }
      peak_reserved = alloc.stats().reserved_bytes.peak;
      std::printf("[budget] %s; peak reserved %.1f MiB of %.1f\n", planner.report().str().c_str(),
                  peak_reserved / 1048576.0, budget / 1048576.0);
    }
    alloc.set_memory_cap_bytes(0);
    alloc.empty_cache();
    EXPECT_LE(peak_reserved, budget);
  }
}
