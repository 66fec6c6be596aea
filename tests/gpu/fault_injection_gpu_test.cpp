// Fault injection on the device: an out-of-memory error at each device allocation of a
// MobileNetV2 training step in turn (memory::InjectOom) leaves weights, BatchNorm running
// statistics, optimizer and GradScaler state bit-identical (train::run_undoable), and the step run
// again computes exactly what a step that never failed does; f32, and f16 autocast with a
// GradScaler. tests/train/fault_injection_test.cpp does the same on the CPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "base/deterministic.h"
#include "gpu_test_util.h"
#include "train/step_fixtures.h"

using namespace frugal;

namespace {

const Device kGpu = Device::cuda(0);

void sweep(DType precision) {
  // Deterministic mode: the retried step uses the clean step's algorithms, so it can match it
  // bit for bit. One step first settles the algorithm cache, so that every setup of the sweep
  // asks for the same allocations.
  DeterministicGuard same_algorithms;
  auto make = [&] { return std::make_unique<train_test::MobileNetStep>(kGpu, precision, 8); };
  make()->step();
  const int64_t n = train_test::oom_at_every_allocation(kGpu, make, 1);
  std::printf("[fault injection] %s: an OOM at each of %lld device allocations of the step\n",
              dtype_name(precision), static_cast<long long>(n));
}

}  // namespace

TEST(FaultInjectionGpu, AnOomAtEachAllocationOfAnF32MobileNetV2Step) {
  SKIP_WITHOUT_GPU();
  sweep(DType::f32);
}

TEST(FaultInjectionGpu, AnOomAtEachAllocationOfAnF16MobileNetV2StepWithGradScaler) {
  SKIP_WITHOUT_GPU();
  sweep(DType::f16);
}
