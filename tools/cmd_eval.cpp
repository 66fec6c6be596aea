// `frugal eval`: load weights (a model file or a training checkpoint) and report test accuracy.
#include <cstdio>

#include "data/loader.h"
#include "models/registry.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "train/checkpoint.h"
#include "train/datasets.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace frugal::tools {

int cmd_eval(const std::vector<std::string>& argv) {
  Args args("eval", argv,
            {"model", "load", "data", "data-dir", "batch", "width", "image-size", "test-limit",
             "device", "workers"},
            {"help"});
  if (args.flag("help")) {
    std::puts("usage: frugal eval --load PATH [--model mobilenet_v2] [--data fashion-mnist]\n"
              "       [--data-dir DIR] [--batch 256] [--width 1.0] [--image-size 32]\n"
              "       [--test-limit N] [--device auto] [--workers 2]\n"
              "  Loads a file written by `frugal train --save` (or a model's safetensors weights)\n"
              "  and prints the test accuracy.");
    return 0;
  }
  if (!args.has("load")) throw UsageError("eval: --load PATH is required");
  const std::string path = args.str("load", "");
  Device device = parse_device(resolve_device(args.str("device", "auto")));
  train::DataConfig dc;
  dc.name = args.str("data", "fashion-mnist");
  dc.dir = args.str("data-dir", "");
  dc.image_size = args.integer("image-size", 32, 8);
  dc.limit = 0;
  dc.test_limit = args.integer("test-limit", -1, -1);
  train::DataSplits splits = train::make_data(dc);

  models::ModelConfig mc;
  mc.num_classes = splits.num_classes;
  mc.in_channels = splits.test->sample_shape()[2];
  mc.width = args.number("width", 1.0);
  auto model = models::create(args.str("model", "mobilenet_v2"), mc);
  model->to(device);
  bool is_checkpoint = train::load_safetensors(path).metadata.count("frugal.format") != 0;
  if (is_checkpoint) {
    train::load_checkpoint(path, *model, nullptr);
  } else {
    train::load_model(path, *model);
  }
  data::DataLoader loader(splits.test, {.batch_size = args.integer("batch", 256, 1),
                                        .shuffle = false,
                                        .num_workers = static_cast<int>(args.integer("workers", 2, 0)),
                                        .transforms = splits.test_transforms, .device = device});
  double acc = train::evaluate(*model, loader);
  std::printf("test accuracy: %.2f%% on %lld samples\n", 100.0 * acc,
              static_cast<long long>(splits.test->size()));
  return 0;
}

}  // namespace frugal::tools
