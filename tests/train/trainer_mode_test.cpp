// train_epoch and evaluate leave the model as they found it when they fail: a refused epoch
// changes neither the mode nor the peak statistics, and an evaluation that throws gives the
// training mode back, so a caller that catches and goes on does not train on running
// statistics.
#include <gtest/gtest.h>

#include "core/factory.h"
#include "memory/allocator.h"
#include "train/trainer.h"
#include "train_test_util.h"

using namespace frugal;

TEST(TrainerMode, ARefusedEpochChangesNeitherTheModeNorThePeaks) {
  auto net = train_test::tiny_cnn();
  auto loader = train_test::tiny_loader(32, 16);
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  net->eval();
  memory::DataPtr high = memory::cpu_allocator().allocate(1 << 20);
  high.reset();
  const int64_t peak = memory::cpu_allocator().stats().allocated_bytes.peak;
  // f16 without a GradScaler is refused.
  EXPECT_THROW(
      train::train_epoch(*net, opt, nullptr, *loader, 0,
                         {.progress = [](const train::Progress&) {}, .precision = DType::f16}),
      Error);
  EXPECT_FALSE(net->is_training());
  EXPECT_EQ(memory::cpu_allocator().stats().allocated_bytes.peak, peak);
}

TEST(TrainerMode, AnEvaluationThatThrowsGivesTheTrainingModeBack) {
  auto net = train_test::tiny_cnn();
  // Images of 2 channels for a model that takes 1: the first convolution throws.
  auto ds = std::make_shared<data::SyntheticDataset>(Shape{8, 8, 2}, 4, 32, 7);
  data::DataLoader loader(ds, {.batch_size = 16, .num_workers = 0});
  net->train();
  EXPECT_THROW(train::evaluate(*net, loader), Error);
  EXPECT_TRUE(net->is_training());
}
