// The extension path: a custom op's hand-written backward passes a gradient check, and a model
// using the custom layer trains.
#include "../../examples/custom_layer.h"

#include "gradcheck.h"
#include "nn/layers.h"
#include "optim/optimizer.h"

using namespace frugal;

TEST(CustomLayer, HandWrittenBackwardPassesGradientCheck) {
  Tensor x = frugal::testing::rand64({3, 4, 5}, 21);
  EXPECT_LT(
      frugal::testing::max_gradient_error([](auto& v) { return custom::squared_relu(v[0]); }, {x}),
      frugal::testing::kGradTolerance);
}

TEST(CustomLayer, HardSwishFromOpsMatchesTheBuiltInOne) {
  Tensor x = frugal::testing::rand64({3, 4, 5}, 22, true, -5, 5);
  EXPECT_LT(
      frugal::testing::max_gradient_error([](auto& v) { return custom::hard_swish(v[0]); }, {x}),
      frugal::testing::kGradTolerance);
  Tensor xf = x.detach().to(DType::f32);
  EXPECT_TRUE(allclose(custom::hard_swish(xf), nn::functional::hardswish(xf), 1e-6, 1e-6));
}

TEST(CustomLayer, ItsParameterIsRegisteredAndTrains) {
  manual_seed(4);
  Generator gen(2);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 6, 3, nn::Conv2dOptions{.padding = 1}));
  auto custom_layer = std::make_shared<custom::SquaredReLUScale>(6);
  net->push_back(custom_layer);
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(6, 3));
  bool found = false;
  for (auto& [name, p] : net->named_parameters()) found = found || name == "1.scale";
  EXPECT_TRUE(found);

  Tensor x = randn({12, 6, 6, 1}, gen);
  Tensor y = from_vector({0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, Shape{12}, {.dtype = DType::i64});
  optim::SGD opt(net->parameters(), {.lr = 0.2, .momentum = 0.9});
  std::vector<double> scale_before = custom_layer->scale.to_vector();
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.5 * first);
  EXPECT_NE(custom_layer->scale.to_vector(), scale_before);  // the custom parameter learned
}
