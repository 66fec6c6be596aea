// Fault injection on the CPU: an out-of-memory error at each allocation of a MobileNetV2
// training step in turn (memory::InjectOom) leaves weights, BatchNorm running statistics,
// optimizer and GradScaler state bit-identical (train::run_undoable), and the step run again
// computes exactly what a step that never failed does. tests/gpu/fault_injection_gpu_test.cpp
// does the same on the device.
#include <gtest/gtest.h>

#include "step_fixtures.h"

using namespace frugal;

namespace {

int64_t sweep(DType precision, int warm_steps) {
  return train_test::oom_at_every_allocation(
      Device::cpu(),
      [&] { return std::make_unique<train_test::MobileNetStep>(Device::cpu(), precision); },
      warm_steps);
}

}  // namespace

// The first step also makes the momentum buffers lazily.
TEST(FaultInjection, AnOomAtEachAllocationOfTheFirstF32MobileNetV2Step) {
  EXPECT_GT(sweep(DType::f32, 0), 1000);
}

TEST(FaultInjection, AnOomAtEachAllocationOfALaterF32MobileNetV2Step) {
  EXPECT_GT(sweep(DType::f32, 1), 1000);
}

// Autocast's f16 weight copies and the scaler's unscale and inf check allocate too (the CPU's
// 16-bit kernels allocate no f32 copies, Note [CPU dtypes]).
TEST(FaultInjection, AnOomAtEachAllocationOfAnF16MobileNetV2StepWithGradScaler) {
  EXPECT_GT(sweep(DType::f16, 1), 1000);
}
