// checkpoint_blocks_in_place: every block of a built model is wrapped in nn::Checkpoint where it
// stands; parameter names and tensors stay (the optimizer's state carries over), gradients are
// those of the plain model, and a second call wraps nothing.
#include "models/checkpoint_in_place.h"

#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "models/registry.h"
#include "nn/functional.h"

using namespace frugal;

namespace {

std::vector<Tensor> gradients_of(nn::Module& model, const Tensor& x, const Tensor& y) {
  model.zero_grad();
  nn::functional::cross_entropy(model(x), y).backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : model.parameters()) grads.push_back(p.grad().detach().clone());
  return grads;
}

}  // namespace

TEST(CheckpointInPlace, WrapsEveryBlockKeepingNamesTensorsAndGradients) {
  manual_seed(4);
  auto model = models::create("mobilenet_v2",
                              {.num_classes = 4, .in_channels = 1, .width = 0.25, .dropout = 0.0});
  Generator gen(2);
  Tensor x = randn({2, 32, 32, 1}, gen);
  Tensor y = from_vector({1, 3}, {2}, {.dtype = DType::i64});
  const nn::NamedTensors before = model->named_parameters();
  const std::vector<Tensor> plain = gradients_of(*model, x, y);

  // MobileNetV2's 17 inverted residuals, its stem and its head: what the "blocks" policy wraps.
  EXPECT_EQ(models::checkpoint_blocks_in_place(*model), 19);
  EXPECT_EQ(models::checkpoint_blocks_in_place(*model), 0);
  EXPECT_NE(model->str().find("Checkpoint"), std::string::npos);
  const nn::NamedTensors after = model->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_EQ(after[i].second.data<float>(), before[i].second.data<float>()) << after[i].first;
  }
  const std::vector<Tensor> checkpointed = gradients_of(*model, x, y);
  ASSERT_EQ(checkpointed.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(allclose(checkpointed[i], plain[i], 1e-5, 1e-7)) << before[i].first;
  }
}

// Every zoo model gets what the "blocks" policy would have given it at construction, the same
// modules under the same paths.
TEST(CheckpointInPlace, WrapsWhatTheBlocksPolicyWraps) {
  for (const char* name : {"mobilenet_v2", "mobilenet_v1", "efficientnet_b0", "resnet18"}) {
    SCOPED_TRACE(name);
    auto wrapped_paths = [](nn::Module& m) {
      std::vector<std::string> paths;
      for (const auto& [path, mod] : m.named_modules()) {
        if (mod->type_name() == "Checkpoint") paths.push_back(path);
      }
      return paths;
    };
    const models::ModelConfig base{.num_classes = 4, .in_channels = 1, .width = 0.25};
    models::ModelConfig with_policy = base;
    with_policy.checkpoint = models::CheckpointPolicy::parse("blocks");
    auto built = models::create(name, with_policy);
    auto in_place = models::create(name, base);
    const int64_t n = models::checkpoint_blocks_in_place(*in_place);
    EXPECT_EQ(wrapped_paths(*in_place), wrapped_paths(*built));
    EXPECT_EQ(n, static_cast<int64_t>(wrapped_paths(*built).size()));
  }
}

TEST(CheckpointInPlace, FindsResNetBlocksInsideItsStages) {
  auto model = models::create("resnet18",
                              {.num_classes = 4, .in_channels = 1, .width = 0.25, .dropout = 0.0});
  EXPECT_EQ(models::checkpoint_blocks_in_place(*model), 8);
}
