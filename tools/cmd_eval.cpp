// `frugal eval`: load weights (a model file or a training checkpoint) and report test accuracy.
#include <cstdio>

#include "data/loader.h"
#include "models/registry.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "train/checkpoint.h"
#include "train/datasets.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace frugal::tools {

int cmd_eval(const std::vector<std::string>& argv) {
  const EvalOptions o = parse_eval_options(argv);
  if (o.help) {
    std::puts(
        "usage: frugal eval --load PATH [--model mobilenet_v2] [--data fashion-mnist]\n"
        "       [--data-dir DIR] [--batch 256] [--width 1.0] [--image-size 32]\n"
        "       [--test-limit N] [--device auto] [--workers 2]\n"
        "  Loads a file written by `frugal train --save` (or a model's safetensors weights)\n"
        "  and prints the test accuracy. Only the test files of the data set are read.");
    return 0;
  }
  const Device device = resolve_device("eval", o.device);
  check_input_file("eval", "load", o.load);
  train::DataSplits splits = train::make_data(o.data);

  models::ModelConfig mc;
  mc.num_classes = splits.num_classes;
  mc.in_channels = splits.test->sample_shape()[2];
  mc.width = o.width;
  auto model = models::create(o.model, mc);
  model->to(device);
  bool is_checkpoint = train::load_safetensors(o.load).metadata.count("frugal.format") != 0;
  if (is_checkpoint) {
    train::load_checkpoint(o.load, *model, nullptr);
  } else {
    train::load_model(o.load, *model);
  }
  data::DataLoader loader(splits.test, {.batch_size = o.batch,
                                        .shuffle = false,
                                        .num_workers = o.workers,
                                        .transforms = splits.test_transforms,
                                        .device = device});
  double acc = train::evaluate(*model, loader);
  std::printf("test accuracy: %.2f%% on %lld samples\n", 100.0 * acc,
              static_cast<long long>(splits.test->size()));
  return 0;
}

}  // namespace frugal::tools
