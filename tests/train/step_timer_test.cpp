// StepTimer on the CPU (one duration per step, each at least what the step slept) and median.
#include "train/step_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "base/error.h"

using namespace frugal;

TEST(StepTimer, OneDurationPerStepOnTheCpu) {
  train::StepTimer timer(Device::cpu(), 3);
  for (int64_t i = 0; i < 3; ++i) {
    timer.begin(i);
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * (i + 1)));
    timer.end(i);
  }
  std::vector<double> ms = timer.milliseconds();
  ASSERT_EQ(ms.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) EXPECT_GE(ms[static_cast<size_t>(i)], 2.0 * (i + 1)) << i;
  EXPECT_STREQ(timer.clock_name(), "steady_clock");
}

TEST(StepTimer, RefusesZeroSteps) { EXPECT_THROW(train::StepTimer(Device::cpu(), 0), Error); }

TEST(StepTimer, Median) {
  EXPECT_EQ(train::median({}), 0.0);
  EXPECT_EQ(train::median({5.0}), 5.0);
  EXPECT_EQ(train::median({9.0, 1.0, 4.0}), 4.0);
  EXPECT_EQ(train::median({9.0, 1.0, 4.0, 2.0}), 3.0);
}
