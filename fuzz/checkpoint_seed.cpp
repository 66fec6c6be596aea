// Writes checkpoint_fuzz's seeds with frugal's own save functions: a checkpoint of the fuzz
// model after two SGD steps (momentum state, the scaler's state, the training state) and its
// weights alone.
//
//   checkpoint_seed OUT_DIR   ->  OUT_DIR/checkpoint.safetensors, OUT_DIR/model.safetensors
#include <cstdio>
#include <string>

#include "fuzz_model.h"
#include "train/checkpoint.h"

int main(int argc, char** argv) {
  using namespace frugal;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto model = fuzz::tiny_model();
  optim::SGD opt(model->parameters(), fuzz::kSgd);
  Generator gen(7);
  for (int step = 0; step < 2; ++step) {
    for (Tensor& p : model->parameters()) p.set_grad(randn(p.shape(), gen));
    opt.step();
  }
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 10});
  train::save_checkpoint(dir + "/checkpoint.safetensors", *model, &opt,
                         {.epoch = 1, .step = 2, .seed = 3, .rng_offset = 4}, &scaler);
  train::save_model(dir + "/model.safetensors", *model);
  return 0;
}
