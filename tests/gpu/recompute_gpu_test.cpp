// Recomputed depthwise outputs on the device (Note [Recomputed convolutions]): MobileNetV2's
// gradients with ModelConfig::recompute_depthwise match those of the kept outputs, f32 and f16.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "base/deterministic.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/ops.h"
#include "gpu_test_util.h"
#include "models/registry.h"

using namespace frugal;

namespace {

std::vector<std::vector<double>> gradients(bool recompute, DType precision) {
  manual_seed(8);
  auto model =
      models::create("mobilenet_v2", {.num_classes = 10, .recompute_depthwise = recompute});
  model->to(Device::cuda(0));
  model->train();
  Generator gen(9);
  Tensor x = randn({8, 64, 64, 3}, gen, {.device = Device::cuda(0)});
  default_generator().set_offset(0);  // the same dropout mask in both runs
  Tensor loss;
  {
    std::optional<AutocastGuard> amp;
    if (precision != DType::f32) amp.emplace(Device::cuda(0), precision);
    Tensor out = (*model)(x);
    loss = mean(mul(out, out));
  }
  loss.backward();
  std::vector<std::vector<double>> g;
  for (const Tensor& p : model->parameters()) g.push_back(p.grad().to_vector());
  return g;
}

}  // namespace

TEST(RecomputedConvGpu, MobileNetV2GradientsMatchTheKeptOutputs) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard same_algorithms;  // the same cuDNN algorithms in both runs, any timing
  for (DType precision : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(precision));
    auto kept = gradients(false, precision), recomputed = gradients(true, precision);
    ASSERT_EQ(kept.size(), recomputed.size());
    for (size_t t = 0; t < kept.size(); ++t) {
      double num = 0, den = 0;
      for (size_t i = 0; i < kept[t].size(); ++i) {
        num += (kept[t][i] - recomputed[t][i]) * (kept[t][i] - recomputed[t][i]);
        den += kept[t][i] * kept[t][i];
      }
      EXPECT_LE(std::sqrt(num), gputest::tolerance(precision) * (std::sqrt(den) + 1e-12))
          << "parameter " << t;
    }
  }
}
