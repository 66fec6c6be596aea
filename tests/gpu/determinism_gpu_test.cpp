// Deterministic mode on the device (Note [Deterministic mode] in base/deterministic.h): two runs
// of MobileNetV2 training from one seed, each choosing its cuDNN algorithms afresh as a new
// process would, end with bit-identical weights, buffers and optimizer state, f32 and f16.
#include <gtest/gtest.h>

#include "base/deterministic.h"
#include "gpu_test_util.h"
#include "kernels/cuda/runtime.h"
#include "train/step_fixtures.h"

using namespace frugal;

namespace {

// Four steps on a batch of 16, the algorithm cache emptied first.
train_test::Snapshot train_from_seed(DType precision) {
  kernels::cuda::forget_conv_algorithms();
  train_test::MobileNetStep s(Device::cuda(0), precision, 16);
  for (int k = 0; k < 4; ++k) s.step();
  return s.state();
}

}  // namespace

TEST(DeterminismGpu, TwoRunsOfOneSeedGiveBitIdenticalWeights) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard on;
  for (DType precision : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(precision));
    const train_test::Snapshot first = train_from_seed(precision);
    const train_test::Snapshot second = train_from_seed(precision);
    train_test::expect_identical(second, first, "the second run");
  }
}
