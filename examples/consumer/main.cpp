// Trains a small MobileNetV2 a few steps on random data through an installed frugal
// (find_package(frugal), one #include), and checks that the loss went down on the batch it
// trained on. Exit status 0 when it did.
#include <cstdio>

#include "frugal.h"

using namespace frugal;

int main() {
  manual_seed(0);
  auto model = models::create("mobilenet_v2", {.num_classes = 4, .in_channels = 1, .width = 0.35});
  optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  Generator gen(1);
  Tensor images = randn({8, 32, 32, 1}, gen);  // [N, H, W, C]
  Tensor labels = from_vector({0, 1, 2, 3, 0, 1, 2, 3}, Shape{8}, {.dtype = DType::i64});
  double first = 0, last = 0;
  for (int step = 0; step < 10; ++step) {
    last = train::train_step(*model, opt, images, labels, DType::f32, nullptr).item();
    if (step == 0) first = last;
  }
  std::printf("consumer: loss %.4f -> %.4f over 10 steps\n", first, last);
  return last < first ? 0 : 1;
}
