// Micro-batches (train_step's gradient accumulation, Note [Micro-batches]) and the budget search
// (Note [Fitting a memory budget]): the accumulated gradient is the whole batch's, and the search
// takes the first way that fits in the documented order.
#include "train/memory_budget.h"

#include <gtest/gtest.h>

#include "core/factory.h"
#include "dist/data_parallel.h"
#include "dist/meta_group.h"
#include "memory/allocator.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "train/memory_estimate.h"
#include "train/trainer.h"

using namespace frugal;

namespace {

// No BatchNorm, so that slices of the batch see the same function as the whole batch.
std::shared_ptr<nn::Sequential> small_net() {
  manual_seed(7);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2dOptions{.padding = 1}));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(8, 10));
  return net;
}

struct Step {
  double loss;
  std::vector<std::vector<double>> grads;
};

Step one_step(int64_t micro_batches) {
  auto net = small_net();
  optim::SGD opt(net->parameters(), {.lr = 0.0});  // gradients stay readable after the step
  Generator g(3);
  Tensor images = randn({6, 5, 5, 3}, g);
  Tensor labels = from_vector({1, 4, 9, 0, 4, 2}, {6}, {.dtype = DType::i64});
  Tensor loss =
      train::train_step(*net, opt, images, labels, DType::f32, nullptr, 0.0, micro_batches);
  Step s{loss.item(), {}};
  for (const Tensor& p : net->parameters()) s.grads.push_back(p.grad().to_vector());
  return s;
}

double mib(int64_t b) { return static_cast<double>(b) / (1 << 20); }

// The budget a predicted peak needs with nothing beside the step: the peak and the headroom.
int64_t need(int64_t peak) { return train::budget_need(peak, 0); }

}  // namespace

TEST(MicroBatches, TheAccumulatedGradientIsTheWholeBatchs) {
  const Step whole = one_step(1);
  for (int64_t m : {2, 3, 4, 6}) {  // 4 slices of 6 rows: 2, 2, 1, 1
    SCOPED_TRACE(m);
    const Step acc = one_step(m);
    EXPECT_NEAR(acc.loss, whole.loss, 1e-6);
    for (size_t t = 0; t < whole.grads.size(); ++t) {
      for (size_t i = 0; i < whole.grads[t].size(); ++i) {
        EXPECT_NEAR(acc.grads[t][i], whole.grads[t][i], 1e-6) << "parameter " << t;
      }
    }
  }
}

TEST(MicroBatches, ABadCountIsRefusedBeforeAnythingChanges) {
  auto net = small_net();
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  Tensor images = zeros({4, 5, 5, 3}), labels = zeros({4}, {.dtype = DType::i64});
  train::train_step(*net, opt, images, labels);  // gradients exist now
  const std::vector<double> grad = net->parameters()[0].grad().to_vector();
  EXPECT_THROW(train::train_step(*net, opt, images, labels, DType::f32, nullptr, 0.0, 5), Error);
  EXPECT_THROW(train::train_step(*net, opt, images, labels, DType::f32, nullptr, 0.0, 0), Error);
  EXPECT_EQ(net->parameters()[0].grad().to_vector(), grad);
}

TEST(MicroBatches, TheEstimateOfAnAccumulatedStepIsTheCpuAllocatorsPeak) {
  memory::Allocator& cpu = memory::cpu_allocator();
  const int64_t base = cpu.stats().allocated_bytes.current;
  cpu.reset_peak_stats();
  auto model = models::create("mobilenet_v2", {.num_classes = 10, .width = 0.5});
  optim::SGD opt(model->parameters(), {.momentum = 0.9});
  const train::MemoryEstimate e = train::estimate_memory(*model, opt, Shape{8, 32, 32, 3}, 10,
                                                         DType::f32, false, /*micro_batches=*/4);
  EXPECT_EQ(e.peak_allocated_bytes, cpu.stats().allocated_bytes.peak - base);
}

TEST(MemoryBudget, TakesTheFirstWayThatFitsInOrder) {
  // Large enough that activations, not parameters and cuBLAS's workspace, make the peak.
  const Shape input{32, 160, 160, 3};
  auto peak = [&](const char* policy, int64_t micro = 1) {
    return train::estimate_memory("mobilenet_v2",
                                  {.checkpoint = models::CheckpointPolicy::parse(policy)}, input,
                                  DType::f16, "sgd", micro)
        .peak_allocated_bytes;
  };
  const int64_t plain = peak("none"), blocks = peak("blocks");
  ASSERT_LT(blocks, plain);
  // The rule itself: the peak, what stays beside the step, and 5% of the peak for reserved.
  EXPECT_EQ(train::budget_need(1000000, 300), 1000000 + 300 + 50000);

  train::BudgetChoice c =
      train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", need(plain));
  EXPECT_TRUE(c.fits);
  EXPECT_EQ(c.checkpoint.mode, models::CheckpointPolicy::Mode::none);
  EXPECT_EQ(c.micro_batches, 1);
  EXPECT_EQ(c.predicted_peak_bytes, plain);
  // The peak alone, without room for what reserved holds beyond it, is not enough.
  c = train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", plain);
  EXPECT_NE(c.checkpoint.mode, models::CheckpointPolicy::Mode::none) << c.str();

  // Between the two: the fewest leading blocks checkpointed.
  const int64_t between = (need(plain) + need(blocks)) / 2;
  c = train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", between);
  EXPECT_TRUE(c.fits) << c.str();
  ASSERT_EQ(c.checkpoint.mode, models::CheckpointPolicy::Mode::first) << c.str();
  EXPECT_LE(need(c.predicted_peak_bytes), between);
  if (c.checkpoint.first > 1) {
    EXPECT_GT(need(peak(("first:" + std::to_string(c.checkpoint.first - 1)).c_str())), between);
  }

  // Below every checkpointed step: micro-batches.
  c = train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", need(blocks) - 1);
  EXPECT_TRUE(c.fits) << c.str() << " under " << mib(need(blocks) - 1) << " MiB";
  EXPECT_GT(c.micro_batches, 1) << c.str();
  EXPECT_LE(need(c.predicted_peak_bytes), need(blocks) - 1);

  c = train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", 1 << 20);
  EXPECT_FALSE(c.fits);
  EXPECT_NE(c.str().find("nothing fits"), std::string::npos);
}

// The search builds models on meta, which draws their initialisation from the default stream;
// the run's model, built after it, must get the weights the same flags give without a budget.
// Counting the blocks moved the stream, so a budget that chose "first:3" trained other weights
// than --checkpoint first:3.
TEST(MemoryBudget, TheSearchLeavesTheRandomStreamWhereItWas) {
  const Shape input{32, 160, 160, 3};  // activations make the peak, as above
  const int64_t plain = train::estimate_memory("mobilenet_v2", {}, input, DType::f16, "sgd", 1,
                                               /*for_cuda=*/true, /*with_arena=*/false)
                            .peak_allocated_bytes;
  manual_seed(5);
  const uint64_t before = default_generator().offset();
  const train::BudgetChoice c =
      train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", need(plain) - 1);
  EXPECT_TRUE(c.checkpoint.mode != models::CheckpointPolicy::Mode::none || c.micro_batches > 1)
      << "the search stopped at the plain step, before it built anything: " << c.str();
  EXPECT_EQ(default_generator().offset(), before);
  EXPECT_EQ(default_generator().seed(), 5u);
}

// What the run keeps beside the step (the loader's staged batch) counts against the budget, and
// so does what a data-parallel wrapper allocates: a budget the plain step fits alone is not
// enough with either.
TEST(MemoryBudget, CountsWhatTheRunKeepsBesideTheStep) {
  const Shape input{16, 64, 64, 3};
  const int64_t plain =
      train::estimate_memory("mobilenet_v2", {}, input, DType::f16).peak_allocated_bytes;
  const int64_t staged = int64_t{3} << 20;
  train::BudgetChoice c =
      train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", need(plain) + staged,
                               true, {.resident_bytes = staged});
  EXPECT_TRUE(c.fits);
  EXPECT_EQ(c.checkpoint.mode, models::CheckpointPolicy::Mode::none) << c.str();
  EXPECT_EQ(c.predicted_peak_bytes, plain + staged);
  c = train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", need(plain), true,
                               {.resident_bytes = staged});
  EXPECT_NE(c.checkpoint.mode, models::CheckpointPolicy::Mode::none) << c.str();

  const train::ModelWrapper wrap = [](std::shared_ptr<nn::Module> m) {
    return std::shared_ptr<nn::Module>(
        std::make_shared<dist::DataParallel>(m, std::make_shared<dist::MetaGroup>(2, 0)));
  };
  const int64_t wrapped =
      train::estimate_memory("mobilenet_v2", {}, input, DType::f16, "sgd", 1, true, false, wrap)
          .peak_allocated_bytes;
  ASSERT_GT(wrapped, plain);  // the gradient buckets
  c = train::choose_for_budget("mobilenet_v2", {}, input, DType::f16, "sgd", need(plain), true,
                               {.wrap = wrap});
  EXPECT_NE(c.checkpoint.mode, models::CheckpointPolicy::Mode::none) << c.str();
}

// The plain step's own error is the caller's to see (BatchNorm over one value a channel: batch 1
// at 32x32 leaves MobileNetV2 a 1x1 map), not "nothing fits; try a smaller batch".
TEST(MemoryBudget, ThePlainStepsErrorIsNotNothingFits) {
  try {
    train::choose_for_budget("mobilenet_v2", {}, Shape{1, 32, 32, 3}, DType::f16, "sgd",
                             int64_t{1} << 30);
    ADD_FAILURE() << "a batch of one went through";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_norm"), std::string::npos) << e.what();
  }
}
