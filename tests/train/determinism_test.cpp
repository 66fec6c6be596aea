// Deterministic mode (Note [Deterministic mode] in base/deterministic.h) on the CPU: two runs of
// MobileNetV2 training from one seed, fed by a shuffling DataLoader with worker threads, end with
// bit-identical weights, buffers and optimizer state, in f32 and under f16 autocast.
#include <gtest/gtest.h>

#include <cmath>

#include "base/deterministic.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "step_fixtures.h"

using namespace frugal;

namespace {

// Two epochs of 4 batches of 4 from a shuffled synthetic set, two loader threads.
train_test::Snapshot train_from_seed(DType precision) {
  train_test::MobileNetStep s(Device::cpu(), precision);
  auto ds = std::make_shared<data::SyntheticDataset>(Shape{32, 32, 1}, 10, 16, 7);
  data::DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .num_workers = 2, .seed = 5});
  for (int64_t e = 0; e < 2; ++e) {
    for (data::Batch& b : loader.epoch(e)) s.step_on(b.images, b.labels);
  }
  for (const Tensor& p : s.model->parameters()) {
    for (double v : p.to_vector()) EXPECT_TRUE(std::isfinite(v)) << "training diverged";
  }
  return s.state();
}

}  // namespace

TEST(Determinism, TheSwitchAndItsGuard) {
  const bool at_start = deterministic();
  {
    DeterministicGuard on;
    EXPECT_TRUE(deterministic());
    {
      DeterministicGuard off(false);
      EXPECT_FALSE(deterministic());
    }
    EXPECT_TRUE(deterministic());
  }
  EXPECT_EQ(deterministic(), at_start);
}

TEST(Determinism, TwoCpuRunsOfOneSeedGiveBitIdenticalWeights) {
  DeterministicGuard on;
  for (DType precision : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(precision));
    const train_test::Snapshot first = train_from_seed(precision);
    const train_test::Snapshot second = train_from_seed(precision);
    train_test::expect_identical(second, first, "the second run");
    EXPECT_NE(first, train_test::MobileNetStep(Device::cpu(), precision).state())
        << "the runs trained nothing";
  }
}
