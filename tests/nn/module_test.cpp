// Modules: PyTorch-style names, counts, modes, default init ranges, batch-norm semantics.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/file_test_util.h"

using namespace frugal;

namespace {

std::shared_ptr<nn::Sequential> conv_bn_relu(int64_t in, int64_t out) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dOptions{.padding = 1, .bias = false}),
      std::make_shared<nn::BatchNorm2d>(out), std::make_shared<nn::ReLU6>()});
}

}  // namespace

TEST(Module, DottedParameterNamesAndCounts) {
  nn::Sequential features;
  features.push_back(conv_bn_relu(3, 8));
  features.push_back(std::make_shared<nn::Linear>(8, 10));
  std::vector<std::string> names;
  for (auto& [n, t] : features.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.0.weight", "0.1.weight", "0.1.bias", "1.weight",
                                             "1.bias"}));
  std::vector<std::string> buffers;
  for (auto& [n, t] : features.named_buffers()) buffers.push_back(n);
  EXPECT_EQ(buffers, (std::vector<std::string>{"0.1.running_mean", "0.1.running_var",
                                               "0.1.num_batches_tracked"}));
  EXPECT_EQ(features.num_parameters(), 8 * 3 * 3 * 3 + 8 + 8 + 8 * 10 + 10);
  features.eval();
  EXPECT_FALSE(features[0]->is_training());
  EXPECT_NE(features.str().find("Conv2d(3, 8, kernel_size=3"), std::string::npos) << features.str();
}

TEST(Module, DefaultInitMatchesPyTorchBounds) {
  nn::Conv2d conv(16, 32, 3);
  double bound = 1.0 / std::sqrt(16.0 * 9.0);
  double max_abs = 0;
  for (double v : conv.weight.to_vector()) max_abs = std::max(max_abs, std::abs(v));
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.9 * bound);  // a uniform draw of 4608 values reaches near the bound
  nn::BatchNorm2d bn(4);
  EXPECT_EQ(bn.weight.to_vector(), (std::vector<double>(4, 1.0)));
  EXPECT_EQ(bn.running_var.to_vector(), (std::vector<double>(4, 1.0)));
}

TEST(BatchNorm, TrainingNormalisesWithBatchStatsAndUpdatesRunningStats) {
  nn::BatchNorm2d bn(2, 1e-5, 0.1);
  // Channel 0 takes 1, 2, 3, 4; channel 1 takes 10, 10, 10, 14.  x is [1, 2, 2, 2] NHWC.
  Tensor x = from_vector({1, 10, 2, 10, 3, 10, 4, 14}, Shape{1, 2, 2, 2});
  Tensor y = bn(x);
  std::vector<double> v = y.to_vector();
  double m0 = 2.5, var0 = 1.25;  // biased variance normalises
  EXPECT_NEAR(v[0], (1 - m0) / std::sqrt(var0 + 1e-5), 1e-5);
  EXPECT_NEAR(v[6], (4 - m0) / std::sqrt(var0 + 1e-5), 1e-5);
  double m1 = 11, var1 = 3;
  EXPECT_NEAR(v[7], (14 - m1) / std::sqrt(var1 + 1e-5), 1e-5);
  // running = 0.9 * running + 0.1 * batch, with the unbiased variance (n / (n - 1)).
  std::vector<double> rm = bn.running_mean.to_vector(), rv = bn.running_var.to_vector();
  EXPECT_NEAR(rm[0], 0.1 * 2.5, 1e-6);
  EXPECT_NEAR(rm[1], 0.1 * 11, 1e-6);
  EXPECT_NEAR(rv[0], 0.9 + 0.1 * (1.25 * 4 / 3), 1e-6);
  EXPECT_NEAR(rv[1], 0.9 + 0.1 * (3.0 * 4 / 3), 1e-6);
  bn(x);  // second update compounds
  EXPECT_NEAR(bn.running_mean.to_vector()[0], 0.9 * 0.25 + 0.25, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item(), 2.0);

  bn.eval();  // evaluation uses the running statistics and leaves them alone
  std::vector<double> before = bn.running_mean.to_vector();
  Tensor ye = bn(x);
  double rm0 = bn.running_mean.to_vector()[0], rv0 = bn.running_var.to_vector()[0];
  EXPECT_NEAR(ye.to_vector()[0], (1 - rm0) / std::sqrt(rv0 + 1e-5), 1e-5);
  EXPECT_EQ(bn.running_mean.to_vector(), before);
  EXPECT_EQ(bn.num_batches_tracked.item(), 2.0);
}

TEST(BatchNorm, FunctionalCountsBatchesWithItsStatisticsAndRejectsABadCounter) {
  Generator gen(2);
  Tensor x = randn({4, 2, 2, 3}, gen);
  Tensor w = ones(Shape{3}), b = zeros(Shape{3});
  Tensor count = zeros(Shape{}, {.dtype = DType::i64});
  nn::functional::batch_norm(x, w, b, Tensor(), Tensor(), {}, count);
  nn::functional::batch_norm(x, w, b, Tensor(), Tensor(), {}, count);
  EXPECT_EQ(count.item(), 2.0);
  nn::functional::batch_norm(x, w, b, Tensor(), Tensor(), {});  // no counter: nothing counted
  EXPECT_EQ(count.item(), 2.0);
  Tensor f32_count = zeros(Shape{});
  try {
    nn::functional::batch_norm(x, w, b, Tensor(), Tensor(), {}, f32_count);
    ADD_FAILURE() << "an f32 counter was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("num_batches_tracked"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i64"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f32_count.item(), 0.0);
}

TEST(Layers, ShapesThroughAStack) {
  Generator gen(3);
  nn::Sequential net;
  net.push_back(
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.stride = 2, .padding = 1}));
  net.push_back(std::make_shared<nn::MaxPool2d>(2));
  net.push_back(std::make_shared<nn::AvgPool2d>(3, 1, 1));
  net.push_back(std::make_shared<nn::Hardswish>());
  net.push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net.push_back(std::make_shared<nn::Flatten>());
  net.push_back(std::make_shared<nn::Dropout>(0.2));
  net.push_back(std::make_shared<nn::Linear>(4, 3));
  Tensor y = net(randn({2, 16, 16, 1}, gen));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  net.eval();
  Tensor a = net(full({1, 16, 16, 1}, 0.5)), b = net(full({1, 16, 16, 1}, 0.5));
  EXPECT_EQ(a.to_vector(), b.to_vector());  // eval: dropout is the identity
}

TEST(Layers, ConvRejectsMismatchedChannelsWithShapes) {
  nn::Conv2d conv(3, 8, 3);
  try {
    conv(zeros({1, 8, 8, 4}));
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("conv2d: input [1, 8, 8, 4] f32 cpu with groups=1 does not match weight "
                     "[8, 3, 3, 3] f32 cpu"),
              std::string::npos)
        << m;
  }
}

// An input smaller than the (dilated) kernel or window has no output, as in PyTorch: C++'s
// truncating division made one output from a window that ran past the padded input.
TEST(Layers, AnInputSmallerThanTheWindowIsRefused) {
  EXPECT_THROW(
      nn::functional::conv2d(ones({1, 2, 2, 1}), ones({1, 3, 3, 1}), Tensor(), {.stride = 2}),
      Error);
  EXPECT_THROW(nn::functional::max_pool2d(ones({1, 1, 1, 3}), {.kernel = 2}), Error);
  EXPECT_THROW(nn::functional::avg_pool2d(ones({1, 1, 1, 3}), {.kernel = 2}), Error);
  // Just large enough: one output.
  EXPECT_EQ(nn::functional::conv2d(ones({1, 3, 3, 1}), ones({1, 3, 3, 1}), Tensor(), {.stride = 2})
                .shape(),
            Shape({1, 1, 1, 1}));
  EXPECT_EQ(nn::functional::max_pool2d(ones({1, 2, 3, 1}), {.kernel = 2}).shape(),
            Shape({1, 1, 1, 1}));
}

TEST(Module, NamedModulesApplyAndParametersWithoutRecursion) {
  nn::Sequential net({conv_bn_relu(3, 8), std::make_shared<nn::Conv2d>(8, 4, 1)});
  auto mods = net.named_modules();
  std::vector<std::string> names;
  for (auto& [name, m] : mods) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"", "0", "0.0", "0.1", "0.2", "1"}));
  EXPECT_EQ(net.modules().size(), 6u);
  EXPECT_EQ(mods[0].second, &net);
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Conv2d", "BatchNorm2d", "ReLU6", "Sequential",
                                             "Conv2d", "Sequential"}));
  EXPECT_TRUE(net.parameters(/*recurse=*/false).empty());
  EXPECT_EQ(net[1]->parameters(false).size(), 2u);  // weight and bias
  EXPECT_EQ(net.parameters().size(), 5u);
}

TEST(Module, StateDictRoundTripsStrictAndNonStrict) {
  auto a = conv_bn_relu(3, 8), b = conv_bn_relu(3, 8);
  nn::init::constant_(static_cast<nn::BatchNorm2d&>(*(*a)[1]).running_mean, 0.25);
  auto sd = a->state_dict();
  std::vector<std::string> names;
  for (auto& [n, t] : sd) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "1.weight", "1.bias", "1.running_mean",
                                             "1.running_var", "1.num_batches_tracked"}));
  auto result = b->load_state_dict(sd);
  EXPECT_TRUE(result.missing.empty() && result.unexpected.empty());
  auto sb = b->state_dict();
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(sb[i].second.to_vector(), sd[i].second.to_vector()) << sd[i].first;
    EXPECT_FALSE(sb[i].second.same(sd[i].second)) << "copied into b's own tensors";
  }
  // Strict: a missing and an unexpected name are both named, and nothing is loaded.
  nn::NamedTensors partial(sd.begin() + 1, sd.end());
  partial.emplace_back("2.weight", zeros({1}));
  auto c = conv_bn_relu(3, 8);
  const std::vector<double> before = c->state_dict()[1].second.to_vector();
  try {
    c->load_state_dict(partial);
    FAIL() << "strict load accepted a partial state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing [0.weight]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unexpected [2.weight]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c->state_dict()[1].second.to_vector(), before);
  auto loose = c->load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(loose.missing, std::vector<std::string>{"0.weight"});
  EXPECT_EQ(loose.unexpected, std::vector<std::string>{"2.weight"});
  EXPECT_EQ(c->state_dict()[1].second.to_vector(), sd[1].second.to_vector());
  // A wrong shape is an error naming the tensor and both shapes.
  nn::NamedTensors bad = sd;
  bad[0].second = zeros({8, 3, 3, 4});
  EXPECT_THROW(c->load_state_dict(bad), Error);
}

TEST(Module, ToDTypeCastsFloatingTensorsInPlace) {
  auto net = conv_bn_relu(3, 8);
  Tensor w = net->parameters()[0];
  net->to(DType::f64);
  EXPECT_EQ(w.dtype(), DType::f64);  // the same handle sees the new dtype
  for (auto& [name, t] : net->state_dict()) {
    EXPECT_EQ(t.dtype(),
              name.find("num_batches_tracked") != std::string::npos ? DType::i64 : DType::f64)
        << name;
  }
  Generator gen(2);
  Tensor y = net->forward(randn({2, 5, 5, 3}, gen, {.dtype = DType::f64}));
  EXPECT_EQ(y.dtype(), DType::f64);
  EXPECT_THROW(net->to(DType::i64), Error);
}

TEST(Module, PrintingShowsEveryLayersArguments) {
  nn::Sequential net({std::make_shared<nn::MaxPool2d>(3, 2, 1), std::make_shared<nn::AvgPool2d>(2),
                      std::make_shared<nn::AdaptiveAvgPool2d>(1),
                      std::make_shared<nn::Dropout>(0.2), std::make_shared<nn::BatchNorm2d>(4)});
  const std::string s = net.str();
  for (const char* want : {"MaxPool2d(kernel_size=3, stride=2, padding=1)",
                           "AvgPool2d(kernel_size=2, stride=2, padding=0, count_include_pad=True)",
                           "AdaptiveAvgPool2d(output_size=1)", "Dropout(p=0.2)",
                           "BatchNorm2d(4, eps=1e-05, momentum=0.1)"}) {
    EXPECT_NE(s.find(want), std::string::npos) << want << " not in\n" << s;
  }
}

// A probability outside [0, 1] is refused when the layer is made, as torch.nn.Dropout does.
TEST(Module, DropoutRefusesABadProbabilityWhenMade) {
  EXPECT_THROW(nn::Dropout(1.5), Error);
  EXPECT_THROW(nn::Dropout(-0.1), Error);
  EXPECT_NO_THROW(nn::Dropout(1.0));
}

// One Linear under two parents (tied weights): listed once, as torch's parameters() does, so an
// optimizer steps it once; it was listed twice and SGD moved it by twice its gradient. state_dict
// and files keep both names, as torch's state_dict does.
TEST(Module, TiedWeightsAreOneParameterButKeepBothNamesInFiles) {
  auto lin = std::make_shared<nn::Linear>(2, 2, false);
  nn::Sequential tied;
  tied.push_back(lin);
  tied.push_back(lin);
  ASSERT_EQ(tied.parameters().size(), 1u);
  EXPECT_EQ(tied.named_parameters()[0].first, "0.weight");
  EXPECT_EQ(tied.named_parameters(/*remove_duplicate=*/false).size(), 2u);
  EXPECT_EQ(tied.num_parameters(), 4);
  EXPECT_EQ(tied.state_dict().size(), 2u);

  const std::vector<double> before = lin->parameters()[0].to_vector();
  optim::SGD opt(tied.parameters(), {.lr = 1.0});
  Tensor x = full({1, 2}, 1.0);
  sum(tied(x)).backward();
  const std::vector<double> g = lin->parameters()[0].grad().to_vector();
  opt.step();
  const std::vector<double> after = lin->parameters()[0].to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(after[i], before[i] - g[i]) << i;

  const Tensor w = lin->parameters()[0];
  EXPECT_THROW(optim::SGD({w, w}, {.lr = 1.0}), Error);

  test::ScratchFile f("tied");
  train::save_model(f.path(), tied);
  EXPECT_EQ(train::load_safetensors(f.path()).tensors.size(), 2u);
  train::load_model(f.path(), tied);
}

// A model cast whole to a 16-bit dtype (torch's model.half()) trains and evaluates: BatchNorm
// widens its 16-bit parameters and running statistics to f32 and writes the statistics back. It
// threw "weight ... does not match input".
TEST(Module, AModelCastToSixteenBitsRunsItsBatchNorms) {
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    manual_seed(4);
    auto half = conv_bn_relu(3, 4);
    half->to(low);
    Generator gen(2);
    Tensor x = randn({2, 5, 5, 3}, gen, {.dtype = low});
    Tensor y = (*half)(x);
    EXPECT_EQ(y.dtype(), low);
    sum(cast(y, DType::f32)).backward();
    const nn::NamedTensors buffers = half->named_buffers();
    EXPECT_EQ(buffers[0].second.dtype(), low);  // running_mean stays 16-bit, updated
    EXPECT_NE(buffers[0].second.to_vector(), std::vector<double>(4, 0.0));
    for (const Tensor& p : half->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().dtype(), low);
    }
    half->eval();
    EXPECT_EQ((*half)(x).dtype(), low);
  }
}
