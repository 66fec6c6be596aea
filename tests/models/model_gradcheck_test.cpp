// Whole-model gradient check: a tiny MobileNetV2 converted to f64, spot-checked against central
// finite differences, so a wiring mistake between correct ops (residuals, strides) shows.
#include "gradcheck.h"
#include "models/registry.h"
#include "nn/functional.h"

using namespace frugal;

namespace {

// Converts every parameter and buffer of `m` to f64 in place (test-only: frugal's optimizers keep
// f32 master weights).
void to_f64(nn::Module& m) {
  auto convert = [](const Tensor& t) {
    if (!is_floating(t.dtype())) return;
    Tensor c = t.detach().to(DType::f64);
    t.impl().storage = c.impl().storage;
    t.impl().dtype = DType::f64;
  };
  for (auto& [n, t] : m.named_parameters()) convert(t);
  for (auto& [n, t] : m.named_buffers()) convert(t);
}

}  // namespace

TEST(ModelGradCheck, TinyMobileNetV2MatchesFiniteDifferences) {
  manual_seed(5);
  auto model = models::create("mobilenet_v2",
                              {.num_classes = 3, .in_channels = 1, .width = 0.25, .dropout = 0.0});
  to_f64(*model);
  Generator gen(8);
  Tensor x = randn({2, 16, 16, 1}, gen, {.dtype = DType::f64});
  Tensor labels = from_vector({0, 2}, Shape{2}, {.dtype = DType::i64});
  auto loss_of = [&] { return nn::functional::cross_entropy(model->forward(x), labels); };
  model->zero_grad();
  loss_of().backward();
  // Batch norm in training mode updates running stats on every forward; they do not feed the
  // training-mode output, so repeated forwards give the same loss.
  double worst = 0;
  int checked = 0;
  for (auto& [name, p] : model->named_parameters()) {
    std::vector<double> analytic = p.grad().to_vector();
    double* w = p.data<double>();
    for (int64_t i = 0; i < p.numel(); i += std::max<int64_t>(1, p.numel() / 3)) {
      double saved = w[i];
      autograd::NoGradGuard ng;
      w[i] = saved + 1e-6;
      double up = loss_of().item();
      w[i] = saved - 1e-6;
      double down = loss_of().item();
      w[i] = saved;
      double numeric = (up - down) / 2e-6;
      double err =
          std::abs(numeric - analytic[static_cast<size_t>(i)]) / std::max(1e-3, std::abs(numeric));
      EXPECT_LT(err, 1e-4) << name << "[" << i << "] analytic " << analytic[static_cast<size_t>(i)]
                           << " numeric " << numeric;
      worst = std::max(worst, err);
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}
