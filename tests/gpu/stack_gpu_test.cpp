// The whole stack on CUDA against the CPU: a small MobileNet-like CNN's loss and every parameter
// gradient (tensors, autograd, nn ops, allocator, copies), in f32, then a few SGD steps.
#include <gtest/gtest.h>

#include <cmath>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/ops.h"
#include "gpu_test_util.h"
#include "nn/layers.h"
#include "optim/optimizer.h"

using namespace frugal;

namespace {

std::shared_ptr<nn::Sequential> small_cnn() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(
      3, 8, 3, nn::Conv2dOptions{.stride = 2, .padding = 1, .bias = false}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(8));
  net->push_back(std::make_shared<nn::ReLU6>());
  net->push_back(
      std::make_shared<nn::Conv2d>(8, 8, 3, nn::Conv2dOptions{.padding = 1, .groups = 8}));
  net->push_back(std::make_shared<nn::BatchNorm2d>(8));
  net->push_back(std::make_shared<nn::Hardswish>());
  net->push_back(std::make_shared<nn::Conv2d>(8, 16, 1));
  net->push_back(std::make_shared<nn::MaxPool2d>(2));
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(16, 5));
  return net;
}

// ||a - b|| / (||b|| + floor): the floor keeps gradients that are zero in exact arithmetic
// (a conv bias right before batch norm) from turning rounding noise into a huge relative error.
double rel_err(const Tensor& a, const Tensor& b, double floor = 1e-4) {
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    num += (va[i] - vb[i]) * (va[i] - vb[i]);
    den += vb[i] * vb[i];
  }
  return std::sqrt(num) / (std::sqrt(den) + floor);
}

}  // namespace

TEST(StackGpu, CnnLossGradientsAndStepsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  gputest::Tf32Scope exact(false);
  manual_seed(3);
  auto cpu_net = small_cnn();
  manual_seed(3);
  auto gpu_net = small_cnn();
  gpu_net->to(Device::cuda(0));
  Generator gen(9);
  Tensor x = randn({4, 12, 12, 3}, gen);
  Tensor y = from_vector({0, 1, 4, 2}, Shape{4}, {.dtype = DType::i64});
  optim::SGD cpu_opt(cpu_net->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD gpu_opt(gpu_net->parameters(), {.lr = 0.05, .momentum = 0.9});
  nn::CrossEntropyLoss ce({.label_smoothing = 0.1});
  for (int step = 0; step < 3; ++step) {
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    Tensor lc = ce(cpu_net->forward(x), y);
    Tensor lg = ce(gpu_net->forward(x.to(Device::cuda(0))), y.to(Device::cuda(0)));
    EXPECT_EQ(lg.device(), Device::cuda(0));
    EXPECT_NEAR(lg.item(), lc.item(), 1e-4 * std::abs(lc.item()) + 1e-5) << "step " << step;
    lc.backward();
    lg.backward();
    auto pc = cpu_net->named_parameters(), pg = gpu_net->named_parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      EXPECT_LT(rel_err(pg[i].second.grad(), pc[i].second.grad()), 5e-3)
          << pc[i].first << " step " << step;
    }
    cpu_opt.step();
    gpu_opt.step();
  }
  auto bc = cpu_net->named_buffers(), bg = gpu_net->named_buffers();
  for (size_t i = 0; i < bc.size(); ++i) {
    EXPECT_LT(rel_err(bg[i].second, bc[i].second), 1e-4) << bc[i].first;
  }
}

TEST(StackGpu, HalfPrecisionForwardStaysCloseToF32) {
  SKIP_WITHOUT_GPU();
  Generator gen(4);
  Tensor x = randn({2, 8, 8, 4}, gen, {.device = Device::cuda(0)});
  Tensor w = randn({6, 3, 3, 4}, gen, {.device = Device::cuda(0)}, 0, 0.2);
  Tensor ref = nn::functional::conv2d(x, w, Tensor(), {.padding = 1});
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor out = nn::functional::conv2d(x.to(dt), w.to(dt), Tensor(), {.padding = 1});
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_LT(rel_err(out, ref), dt == DType::f16 ? 5e-3 : 2e-2) << dt;
  }
}

// Autocast on the GPU: f16/bf16 forward and backward of the whole CNN (few-channel stem,
// depthwise, pointwise with bias, linear), parameter gradients in f32 and close to the CPU's f32
// ones. The conv weight gradients come out of the kernels in f32 (autocast::grad_dtype).
TEST(StackGpu, AutocastGradientsArriveInF32AndMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  gputest::Tf32Scope exact(false);
  manual_seed(5);
  auto cpu_net = small_cnn();
  manual_seed(5);
  auto gpu_net = small_cnn();
  gpu_net->to(Device::cuda(0));
  Generator gen(11);
  Tensor x = randn({8, 16, 16, 3}, gen);
  Tensor y = from_vector({0, 1, 4, 2, 3, 3, 1, 0}, Shape{8}, {.dtype = DType::i64});
  nn::CrossEntropyLoss ce;
  Tensor lc = ce(cpu_net->forward(x), y);
  lc.backward();
  for (DType low : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(low));
    gpu_net->zero_grad();
    Tensor lg;
    {
      AutocastGuard amp(Device::cuda(0), low);
      lg = ce(gpu_net->forward(x.to(Device::cuda(0))), y.to(Device::cuda(0)));
    }
    EXPECT_EQ(lg.dtype(), DType::f32);
    EXPECT_NEAR(lg.item(), lc.item(), (low == DType::f16 ? 1e-2 : 5e-2) * std::abs(lc.item()));
    lg.backward();
    auto pc = cpu_net->named_parameters(), pg = gpu_net->named_parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      ASSERT_TRUE(pg[i].second.grad().defined()) << pc[i].first;
      EXPECT_EQ(pg[i].second.grad().dtype(), DType::f32) << pc[i].first;
      // Rounding of the activations: about 3% in f16, 10% in bf16; a wrong kernel is off by 100%.
      EXPECT_LT(rel_err(pg[i].second.grad(), pc[i].second.grad(), 1e-2),
                low == DType::f16 ? 6e-2 : 2e-1)
          << pc[i].first;
    }
  }
}
