// Model layouts against torchvision: exact parameter counts, a sample of names and shapes
// (torchvision's OIHW written as frugal's OHWI), parameter tensor counts, initialisation
// statistics, and output shapes on the meta device at 224x224.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "model_test_util.h"
#include "models/efficientnet.h"
#include "models/mobilenet_v1.h"
#include "models/mobilenet_v2.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "nn/construction_device.h"

using namespace frugal;
using frugal::testing::expect_shapes;
using frugal::testing::ohwi;

namespace {

// Sample mean and standard deviation of a tensor's values.
std::pair<double, double> moments(const Tensor& t) {
  std::vector<double> v = t.to_vector();
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  double m = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - m) * (x - m);
  return {m, std::sqrt(s2 / static_cast<double>(v.size()))};
}

// Runs `net` in eval mode on the meta device with a [2, 224, 224, 3] input. Without gradients:
// nn's eval-mode batch_norm reads running_var on the host when its inputs require grad, and
// training-mode BatchNorm2d reads num_batches_tracked, neither of which a meta tensor has.
Shape meta_output_shape(nn::Module& net) {
  autograd::NoGradGuard no_grad;
  net.eval();
  net.to(Device::meta());
  Tensor x = zeros(Shape{2, 224, 224, 3}, {.device = Device::meta()});
  Tensor y = net.forward(x);
  EXPECT_TRUE(y.device().is_meta());
  return y.shape();
}

}  // namespace

TEST(MobileNetV2, TorchvisionLayout) {
  models::MobileNetV2 net;
  EXPECT_EQ(net.num_parameters(), 3504872);
  auto params = net.named_parameters();
  EXPECT_EQ(params.size(), 158u);  // len(list(torchvision.models.mobilenet_v2().parameters()))
  EXPECT_EQ(params.front().first, "features.0.0.weight");
  EXPECT_EQ(params.back().first, "classifier.1.bias");
  expect_shapes(params, {{"features.0.0.weight", ohwi(32, 3, 3, 3)},
                         {"features.0.1.weight", Shape{32}},
                         {"features.1.conv.0.0.weight", ohwi(32, 1, 3, 3)},
                         {"features.1.conv.0.1.bias", Shape{32}},
                         {"features.1.conv.1.weight", ohwi(16, 32, 1, 1)},
                         {"features.1.conv.2.weight", Shape{16}},
                         {"features.2.conv.0.0.weight", ohwi(96, 16, 1, 1)},
                         {"features.2.conv.1.0.weight", ohwi(96, 1, 3, 3)},
                         {"features.2.conv.2.weight", ohwi(24, 96, 1, 1)},
                         {"features.2.conv.3.bias", Shape{24}},
                         {"features.17.conv.2.weight", ohwi(320, 960, 1, 1)},
                         {"features.18.0.weight", ohwi(1280, 320, 1, 1)},
                         {"features.18.1.weight", Shape{1280}},
                         {"classifier.1.weight", Shape{1000, 1280}},
                         {"classifier.1.bias", Shape{1000}}});
  expect_shapes(net.named_buffers(), {{"features.0.1.running_mean", Shape{32}},
                                      {"features.0.1.running_var", Shape{32}},
                                      {"features.0.1.num_batches_tracked", Shape{}},
                                      {"features.17.conv.3.running_var", Shape{320}}});
  EXPECT_EQ(net.named_buffers().size(), 52u * 3);  // 52 BatchNorm2d layers
  EXPECT_EQ(models::make_divisible(1280 * 1.4), 1792);

  // Initialisation as torchvision: kaiming_normal_(fan_out), BN 1/0, Linear N(0, 0.01)/0.
  ASSERT_EQ(params[153].first, "features.18.0.weight");
  auto [m, s] = moments(params[153].second);
  EXPECT_NEAR(m, 0.0, 0.002);
  EXPECT_NEAR(s, std::sqrt(2.0 / 1280.0), 0.02 * std::sqrt(2.0 / 1280.0));
  ASSERT_EQ(params[156].first, "classifier.1.weight");
  EXPECT_NEAR(moments(params[156].second).second, 0.01, 0.0003);
  EXPECT_EQ(moments(params[157].second), (std::pair<double, double>{0.0, 0.0}));
  EXPECT_EQ(moments(params[154].second), (std::pair<double, double>{1.0, 0.0}));

  EXPECT_EQ(meta_output_shape(net), (Shape{2, 1000}));
  // The feature map before pooling is 7x7 at 224, as in torchvision.
  autograd::NoGradGuard no_grad;
  Tensor f = frugal::testing::submodule(net, "features")
                 ->forward(zeros(Shape{1, 224, 224, 3}, {.device = Device::meta()}));
  EXPECT_EQ(f.shape(), (Shape{1, 7, 7, 1280}));
}

TEST(MobileNetV1, PaperLayout) {
  models::MobileNetV1 net;
  EXPECT_EQ(net.num_parameters(), 4231976);
  auto params = net.named_parameters();
  EXPECT_EQ(params.size(), 3u + 13 * 6 + 2);
  expect_shapes(params, {{"features.0.0.weight", ohwi(32, 3, 3, 3)},
                         {"features.0.1.bias", Shape{32}},
                         {"features.1.dw.0.weight", ohwi(32, 1, 3, 3)},
                         {"features.1.dw.1.weight", Shape{32}},
                         {"features.1.pw.0.weight", ohwi(64, 32, 1, 1)},
                         {"features.6.dw.0.weight", ohwi(256, 1, 3, 3)},
                         {"features.12.pw.0.weight", ohwi(1024, 512, 1, 1)},
                         {"features.13.pw.0.weight", ohwi(1024, 1024, 1, 1)},
                         {"classifier.weight", Shape{1000, 1024}},
                         {"classifier.bias", Shape{1000}}});
  // Convs carry no bias: every conv weight is followed by BN weight and bias only.
  for (const auto& [name, t] : params) {
    EXPECT_EQ(name.find(".0.bias"), std::string::npos) << name;
  }
  EXPECT_EQ(meta_output_shape(net), (Shape{2, 1000}));
  autograd::NoGradGuard no_grad;
  Tensor f = frugal::testing::submodule(net, "features")
                 ->forward(zeros(Shape{1, 224, 224, 3}, {.device = Device::meta()}));
  EXPECT_EQ(f.shape(), (Shape{1, 7, 7, 1024}));
}

TEST(EfficientNetB0, TorchvisionLayout) {
  models::EfficientNetB0 net;
  EXPECT_EQ(net.num_parameters(), 5288548);
  auto params = net.named_parameters();
  EXPECT_EQ(params.size(), 213u);  // len(list(torchvision.models.efficientnet_b0().parameters()))
  EXPECT_EQ(params.front().first, "features.0.0.weight");
  EXPECT_EQ(params.back().first, "classifier.1.bias");
  expect_shapes(params, {{"features.0.0.weight", ohwi(32, 3, 3, 3)},
                         {"features.1.0.block.0.0.weight", ohwi(32, 1, 3, 3)},
                         {"features.1.0.block.1.fc1.weight", ohwi(8, 32, 1, 1)},
                         {"features.1.0.block.1.fc1.bias", Shape{8}},
                         {"features.1.0.block.1.fc2.weight", ohwi(32, 8, 1, 1)},
                         {"features.1.0.block.1.fc2.bias", Shape{32}},
                         {"features.1.0.block.2.0.weight", ohwi(16, 32, 1, 1)},
                         {"features.2.0.block.0.0.weight", ohwi(96, 16, 1, 1)},
                         {"features.2.0.block.2.fc1.weight", ohwi(4, 96, 1, 1)},
                         {"features.3.0.block.1.0.weight", ohwi(144, 1, 5, 5)},
                         {"features.6.3.block.3.1.weight", Shape{192}},
                         {"features.7.0.block.3.0.weight", ohwi(320, 1152, 1, 1)},
                         {"features.8.0.weight", ohwi(1280, 320, 1, 1)},
                         {"classifier.1.weight", Shape{1000, 1280}}});
  // Stochastic depth grows linearly with the block index: p * id / 16.
  auto* first = dynamic_cast<models::MBConv*>(frugal::testing::submodule(net, "features.1.0"));
  auto* mid =
      dynamic_cast<models::MBConv*>(frugal::testing::submodule(net, "features.4.1"));  // id 6
  auto* last = dynamic_cast<models::MBConv*>(frugal::testing::submodule(net, "features.7.0"));
  ASSERT_TRUE(first && mid && last);
  EXPECT_EQ(first->stochastic_depth().p(), 0.0);
  EXPECT_DOUBLE_EQ(mid->stochastic_depth().p(), 0.2 * 6 / 16);
  EXPECT_DOUBLE_EQ(last->stochastic_depth().p(), 0.2 * 15 / 16);
  EXPECT_FALSE(first->use_residual());
  EXPECT_TRUE(mid->use_residual());
  ASSERT_EQ(params[211].first, "classifier.1.weight");
  // Linear: U(-1/sqrt(out), 1/sqrt(out)), bias 0.
  double lim = 1.0 / std::sqrt(1000.0), max_abs = 0;
  for (double v : params[211].second.to_vector()) max_abs = std::max(max_abs, std::abs(v));
  EXPECT_LE(max_abs, lim);
  EXPECT_GT(max_abs, 0.99 * lim);
  EXPECT_EQ(meta_output_shape(net), (Shape{2, 1000}));
}

TEST(ResNet18, TorchvisionLayout) {
  models::ResNet18 net;
  EXPECT_EQ(net.num_parameters(), 11689512);
  auto params = net.named_parameters();
  EXPECT_EQ(params.size(), 62u);  // len(list(torchvision.models.resnet18().parameters()))
  expect_shapes(params, {{"conv1.weight", ohwi(64, 3, 7, 7)},
                         {"bn1.weight", Shape{64}},
                         {"layer1.0.conv1.weight", ohwi(64, 64, 3, 3)},
                         {"layer1.1.bn2.bias", Shape{64}},
                         {"layer2.0.conv1.weight", ohwi(128, 64, 3, 3)},
                         {"layer2.0.downsample.0.weight", ohwi(128, 64, 1, 1)},
                         {"layer2.0.downsample.1.weight", Shape{128}},
                         {"layer4.1.conv2.weight", ohwi(512, 512, 3, 3)},
                         {"fc.weight", Shape{1000, 512}},
                         {"fc.bias", Shape{1000}}});
  expect_shapes(net.named_buffers(), {{"layer4.1.bn2.running_mean", Shape{512}},
                                      {"layer3.0.downsample.1.num_batches_tracked", Shape{}}});
  EXPECT_EQ(frugal::testing::shapes_of(params).count("layer1.0.downsample.0.weight"), 0u);
  EXPECT_EQ(meta_output_shape(net), (Shape{2, 1000}));
}

TEST(Registry, NamesDescriptionsAndUnknownName) {
  EXPECT_EQ(models::names(), (std::vector<std::string>{"mobilenet_v1", "mobilenet_v2",
                                                       "efficientnet_b0", "resnet18"}));
  const models::ModelConfig small{.num_classes = 10, .in_channels = 1, .width = 0.25};
  for (const std::string& name : models::names()) {
    EXPECT_FALSE(models::description(name).empty());
    auto net = models::create(name, small);
    ASSERT_NE(net, nullptr);
    auto params = net->named_parameters();
    EXPECT_EQ(params.back().second.shape()[0], 10) << name;  // the classifier's bias
  }
  EXPECT_EQ(models::create("mobilenet_v2", small)->type_name(), "MobileNetV2");
  EXPECT_EQ(models::create("resnet18", small)->type_name(), "ResNet");
  EXPECT_EQ(models::create("mobilenet_v2")->num_parameters(), 3504872);
  // torchvision's width rounding (its _make_divisible) worked out by hand for width 0.25.
  EXPECT_EQ(models::create("mobilenet_v2", small)->num_parameters(), 250778);
  EXPECT_EQ(models::create("efficientnet_b0", small)->num_parameters(), 328812);
  try {
    models::create("mobilenet_v3");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("mobilenet_v3"), std::string::npos) << msg;
    for (const std::string& name : models::names()) {
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(models::description("vgg16"), Error);
  EXPECT_THROW(models::create("mobilenet_v2", {.num_classes = 0}), Error);
  EXPECT_THROW(models::create("efficientnet_b0", {.drop_connect = 1.5}), Error);
}

// Every zoo model's BatchNorm has torchvision's eps 1e-5 and momentum 0.1 (EfficientNet-B0 too:
// only B5-B7 take eps 1e-3 and momentum 0.01 there), which parameter counts cannot see.
TEST(Registry, EveryBatchNormHasTorchvisionsEpsAndMomentum) {
  for (const char* name : {"mobilenet_v1", "mobilenet_v2", "efficientnet_b0", "resnet18"}) {
    SCOPED_TRACE(name);
    nn::ConstructionDeviceGuard on_meta(Device::meta());
    auto net = models::create(name, {});
    int64_t norms = 0;
    for (const auto& [path, m] : net->named_modules()) {
      if (m->type_name() != "BatchNorm2d") continue;
      ++norms;
      EXPECT_NE(m->str().find("eps=1e-05, momentum=0.1)"), std::string::npos)
          << path << ": " << m->str();
    }
    EXPECT_GT(norms, 10);
  }
}

// The stem is block 0 of a checkpoint policy in MobileNetV1 as in MobileNetV2 and EfficientNet:
// "blocks" wraps it with the 13 separable blocks, "first:1" wraps it alone.
TEST(MobileNetV1, TheStemIsBlockZeroOfACheckpointPolicy) {
  nn::ConstructionDeviceGuard on_meta(Device::meta());
  auto count = [](const char* policy) {
    auto net =
        models::create("mobilenet_v1", {.checkpoint = models::CheckpointPolicy::parse(policy)});
    std::vector<std::string> wrapped;
    for (const auto& [path, m] : net->named_modules()) {
      if (m->type_name() == "Checkpoint") wrapped.push_back(path);
    }
    return wrapped;
  };
  EXPECT_EQ(count("blocks").size(), 14u);
  EXPECT_EQ(count("first:1"), (std::vector<std::string>{"features.0"}));
}

// Convolutions start as torchvision's: kaiming normal, fan_out = out_channels * kh * kw (not
// divided by the groups, as PyTorch computes it for depthwise weights too), zero mean.
TEST(Registry, ConvolutionsStartWithTorchvisionsKaimingFanOut) {
  struct Case {
    const char* model;
    const char* param;
    double fan_out;
  };
  for (const Case& c : {Case{"resnet18", "conv1.weight", 64.0 * 49},
                        Case{"resnet18", "layer3.0.downsample.0.weight", 256.0},
                        Case{"mobilenet_v2", "features.2.conv.1.0.weight", 96.0 * 9},
                        Case{"efficientnet_b0", "features.3.0.block.1.0.weight", 144.0 * 25}}) {
    SCOPED_TRACE(std::string(c.model) + " " + c.param);
    manual_seed(1);
    auto net = models::create(c.model, {});
    Tensor w;
    for (const auto& [name, p] : net->named_parameters()) {
      if (name == c.param) w = p;
    }
    ASSERT_TRUE(w.defined());
    const auto [m, s] = moments(w);
    const double want = std::sqrt(2.0 / c.fan_out);
    EXPECT_NEAR(s, want, 0.08 * want);
    EXPECT_NEAR(m, 0.0, 0.1 * want);
  }
}
