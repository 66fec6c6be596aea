// StepCallbacks through train_epoch on the CPU: the points of each step in order, micro-batches
// firing the inner points once per slice, the step count running across epochs, and the loss
// handed to the points that have one.
#include "train/step_callbacks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/factory.h"
#include "train/trainer.h"
#include "train_test_util.h"

using namespace frugal;

namespace {

struct Seen {
  std::vector<std::string> points;
  std::vector<int64_t> global_steps, steps, epochs, micro;
  std::vector<bool> has_loss;
};

Seen run(int64_t epochs, int64_t micro_batches, bool graph = false) {
  manual_seed(3);
  auto net = train_test::tiny_cnn();
  auto loader = train_test::tiny_loader(32, 16);  // two steps an epoch
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  train::StepCallbacks cb;
  Seen seen;
  cb.add_all([&](const train::StepInfo& s) {
    seen.points.push_back(train::step_point_name(s.point));
    seen.global_steps.push_back(s.global_step);
    seen.steps.push_back(s.step);
    seen.epochs.push_back(s.epoch);
    seen.micro.push_back(s.micro_batch);
    seen.has_loss.push_back(s.loss.defined());
    EXPECT_EQ(s.device, Device::cpu());
  });
  for (int64_t e = 0; e < epochs; ++e) {
    train::train_epoch(*net, opt, nullptr, *loader, e,
                       {.progress = [](const train::Progress&) {},
                        .graph = graph,
                        .micro_batches = micro_batches,
                        .callbacks = &cb});
  }
  EXPECT_EQ(cb.steps_finished(), 2 * epochs);
  return seen;
}

}  // namespace

TEST(StepCallbacks, FireAtEveryPointOfEveryStepInOrder) {
  Seen s = run(2, 1);
  const std::vector<std::string> step = {"step_begin", "after_forward", "after_backward",
                                         "after_optimizer", "step_end"};
  std::vector<std::string> expected;
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i < 2; ++i) expected.insert(expected.end(), step.begin(), step.end());
    expected.push_back("epoch_end");
  }
  EXPECT_EQ(s.points, expected);
  // Global steps count finished steps across epochs: 0 for the first step's points, 3 for the
  // last's, and 4 at the second epoch's end.
  EXPECT_EQ(s.global_steps.front(), 0);
  EXPECT_EQ(s.global_steps[5], 1);   // the second step's step_begin
  EXPECT_EQ(s.global_steps[20], 3);  // the fourth step's step_end
  EXPECT_EQ(s.global_steps.back(), 4);
  EXPECT_EQ(s.epochs.back(), 1);
  EXPECT_EQ(s.steps[5], 1);
  // The loss is there where the step has one.
  for (size_t i = 0; i < s.points.size(); ++i) {
    const bool want = s.points[i] != "step_begin" && s.points[i] != "epoch_end";
    EXPECT_EQ(s.has_loss[i], want) << s.points[i];
  }
}

// A graph step's eager calls (the warm-up; every call where graphs do not exist, as here) run
// host code inside the step, so every point fires for them as for plain steps.
TEST(StepCallbacks, TheEagerCallsOfAGraphStepFireEveryPoint) {
  EXPECT_EQ(run(2, 1, /*graph=*/true).points, run(2, 1).points);
}

TEST(StepCallbacks, MicroBatchesFireTheInnerPointsOncePerSlice) {
  Seen s = run(1, 2);
  const std::vector<std::string> step = {"step_begin",    "after_forward",  "after_backward",
                                         "after_forward", "after_backward", "after_optimizer",
                                         "step_end"};
  ASSERT_EQ(s.points.size(), 2 * step.size() + 1);
  EXPECT_EQ(std::vector<std::string>(s.points.begin(), s.points.begin() + 7), step);
  EXPECT_EQ(s.micro[1], 0);
  EXPECT_EQ(s.micro[3], 1);
}

TEST(StepCallbacks, AddRunsSeveralPerPointInOrder) {
  train::StepCallbacks cb;
  EXPECT_TRUE(cb.empty());
  std::string order;
  cb.add(train::StepPoint::after_backward, [&](const train::StepInfo&) { order += "a"; });
  cb.add(train::StepPoint::after_backward, [&](const train::StepInfo&) { order += "b"; });
  cb.add(train::StepPoint::step_end, [&](const train::StepInfo&) { order += "e"; });
  EXPECT_FALSE(cb.empty());
  cb.fire(train::StepPoint::after_forward);
  cb.fire(train::StepPoint::after_backward);
  cb.fire(train::StepPoint::step_end);
  EXPECT_EQ(order, "abe");
  EXPECT_EQ(cb.steps_finished(), 1);
}
