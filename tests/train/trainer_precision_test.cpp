// train_epoch with EpochOptions::precision on the CPU: bf16 autocast and f16 with a GradScaler
// both bring the epoch loss down on a learnable synthetic set; f16 without a scaler is refused.
// EpochOptions::graph runs eagerly here and refuses a schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "core/factory.h"
#include "data/synthetic.h"
#include "nn/layers.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "train/trainer.h"

using namespace frugal;

namespace {

std::shared_ptr<nn::Sequential> tiny_cnn() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(
      std::make_shared<nn::Conv2d>(1, 8, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(8));
  net->push_back(std::make_shared<nn::ReLU6>());
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(8, 4));
  return net;
}

std::vector<double> epoch_losses(DType precision, optim::GradScaler* scaler, int epochs) {
  manual_seed(3);
  auto ds = std::make_shared<data::SyntheticDataset>(Shape{8, 8, 1}, 4, 64, 7,
                                                     data::SyntheticOptions{.noise = 0.2f});
  data::DataLoader loader(
      ds, {.batch_size = 16, .shuffle = true, .drop_last = true, .num_workers = 0, .seed = 1});
  auto net = tiny_cnn();
  optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
  std::vector<double> out;
  for (int e = 0; e < epochs; ++e) {
    train::EpochStats s = train::train_epoch(
        *net, opt, nullptr, loader, e,
        {.progress = [](const train::Progress&) {}, .precision = precision, .scaler = scaler});
    out.push_back(s.loss);
  }
  return out;
}

}  // namespace

constexpr int kEpochs = 8;

// The f32 run of the same seed is the reference the 16-bit runs must track.
const std::vector<double>& f32_losses() {
  static const std::vector<double> l = epoch_losses(DType::f32, nullptr, kEpochs);
  return l;
}

TEST(TrainerPrecision, Bf16AutocastTrainsLikeF32) {
  std::vector<double> l = epoch_losses(DType::bf16, nullptr, kEpochs);
  EXPECT_LT(l.back(), 0.75 * l.front()) << l.front() << " -> " << l.back();
  EXPECT_NEAR(l.back(), f32_losses().back(), 0.05);
  EXPECT_NE(l.back(), f32_losses().back()) << "identical to f32: autocast did not run";
}

TEST(TrainerPrecision, F16WithAScalerTrainsLikeF32AndKeepsTheScaleAcrossEpochs) {
  optim::GradScaler scaler({.init_scale = 8.0, .growth_interval = 4});
  std::vector<double> l = epoch_losses(DType::f16, &scaler, kEpochs);
  EXPECT_LT(l.back(), 0.75 * l.front()) << l.front() << " -> " << l.back();
  EXPECT_NEAR(l.back(), f32_losses().back(), 0.02);
  EXPECT_NE(l.back(), f32_losses().back()) << "identical to f32: autocast did not run";
  // 8 epochs x 4 steps, all clean at these magnitudes: the scale grew 8 times (every 4 steps),
  // which it can only do if the scaler carried its state from epoch to epoch.
  EXPECT_EQ(scaler.get_scale(), 8.0 * 256.0);
}

TEST(TrainerPrecision, F16WithoutAScalerIsRefused) {
  EXPECT_THROW(epoch_losses(DType::f16, nullptr, 1), Error);
}

// EpochOptions::graph where graphs do not exist: the same steps, eagerly. (The replayed path is
// CapturedStepGpu.TrainEpochWithGraphTracksEager.)
TEST(TrainerGraph, OnTheCpuTheGraphOptionTrainsLikeEager) {
  auto run = [](bool graph) {
    manual_seed(3);
    auto ds = std::make_shared<data::SyntheticDataset>(Shape{8, 8, 1}, 4, 40, 7,
                                                       data::SyntheticOptions{.noise = 0.2f});
    // 40 samples in batches of 16: the last batch of 8 takes the eager path.
    data::DataLoader loader(ds, {.batch_size = 16, .shuffle = true, .num_workers = 0, .seed = 1});
    auto net = tiny_cnn();
    optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
    std::vector<double> losses;
    for (int e = 0; e < 3; ++e) {
      losses.push_back(
          train::train_epoch(*net, opt, nullptr, loader, e,
                             {.progress = [](const train::Progress&) {}, .graph = graph})
              .loss);
    }
    return losses;
  };
  const std::vector<double> eager = run(false), graphed = run(true);
  ASSERT_EQ(graphed.size(), eager.size());
  for (size_t e = 0; e < eager.size(); ++e) EXPECT_NEAR(graphed[e], eager[e], 1e-6) << e;
}

// The captured step splits its batch as the eager steps do: EpochOptions::micro_batches used to
// be dropped from the graph's step, so a budget that chose micro-batches ran the whole batch.
TEST(TrainerGraph, TheGraphStepKeepsTheMicroBatches) {
  auto run = [](bool graph, int64_t micro_batches) {
    manual_seed(3);
    auto ds = std::make_shared<data::SyntheticDataset>(Shape{8, 8, 1}, 4, 32, 7,
                                                       data::SyntheticOptions{.noise = 0.2f});
    data::DataLoader loader(ds, {.batch_size = 16, .num_workers = 0});
    auto net = tiny_cnn();
    optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
    train::train_epoch(*net, opt, nullptr, loader, 0,
                       {.progress = [](const train::Progress&) {},
                        .graph = graph,
                        .micro_batches = micro_batches});
    return net->parameters()[0].to_vector();
  };
  const std::vector<double> eager4 = run(false, 4), graph4 = run(true, 4), graph1 = run(true, 1);
  EXPECT_EQ(graph4, eager4);
  // BatchNorm normalises each micro-batch with its own statistics: the whole batch differs.
  EXPECT_NE(graph1, eager4);
}

TEST(TrainerGraph, NonsenseOptionsAreRefused) {
  auto ds = std::make_shared<data::SyntheticDataset>(Shape{8, 8, 1}, 4, 16, 7);
  data::DataLoader loader(ds, {.batch_size = 8, .num_workers = 0});
  auto net = tiny_cnn();
  optim::SGD opt(net->parameters(), {.lr = 0.2});
  const std::vector<double> before = net->parameters()[0].to_vector();
  EXPECT_THROW(train::train_epoch(*net, opt, nullptr, loader, 0, {.log_every = 0}), Error);
  EXPECT_THROW(train::train_epoch(*net, opt, nullptr, loader, 0, {.micro_batches = 0}), Error);
  EXPECT_EQ(net->parameters()[0].to_vector(), before);  // refused before any step
}

TEST(TrainerGraph, AScheduleStepsTheLearningRateKeptOnTheDevice) {
  auto run = [](bool graph, double* lr_on_device) {
    manual_seed(3);
    auto ds = std::make_shared<data::SyntheticDataset>(Shape{8, 8, 1}, 4, 32, 7);
    data::DataLoader loader(ds, {.batch_size = 8, .num_workers = 0});
    auto net = tiny_cnn();
    optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
    optim::StepLR sched(opt, 2, 0.5);
    double loss = 0;
    for (int e = 0; e < 2; ++e) {
      loss = train::train_epoch(*net, opt, &sched, loader, e,
                                {.progress = [](const train::Progress&) {}, .graph = graph})
                 .loss;
    }
    *lr_on_device = opt.lr_on_device().defined() ? opt.lr_on_device().item() : -1.0;
    EXPECT_EQ(opt.lr(), 0.2 * std::pow(0.5, 4));  // 8 steps, halved every 2
    return loss;
  };
  double eager_lr = 0, graph_lr = 0;
  const double eager = run(false, &eager_lr);
  const double graphed = run(true, &graph_lr);
  EXPECT_EQ(eager_lr, -1.0);  // eager training leaves the learning rate on the host
  EXPECT_EQ(graph_lr, static_cast<double>(static_cast<float>(0.2 * std::pow(0.5, 4))));
  EXPECT_NEAR(graphed, eager, 1e-6);
}
