// `frugal eval`: load weights (a model file or a training checkpoint) and report test accuracy.
#include <cstdio>
#include <optional>

#include "data/loader.h"
#include "models/registry.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/trained_with.h"
#include "train/checkpoint.h"
#include "train/datasets.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace frugal::tools {
namespace {

// Note [What eval takes from a checkpoint]: the checkpoint's values where the flags were left
// out; a contradicting --model or --width refused, another --image-size or --data said.
void apply_trained_with(const TrainedWith& t, EvalOptions& o) {
  const std::string trained = "eval: '" + o.load + "' was trained ";
  if (o.model_given && o.model != t.model) {
    throw UsageError(trained + "as --model " + t.model + ", and this run has --model " + o.model +
                     "; leave --model out");
  }
  if (o.width_given && o.width != t.width) {
    throw UsageError(detail::str(trained, "at --width ", t.width, ", and this run has --width ",
                                 o.width, "; leave --width out"));
  }
  o.model = t.model;
  o.width = t.width;
  if (!o.image_size_given) {
    o.data.image_size = t.image_size;
  } else if (o.data.image_size != t.image_size) {
    std::printf("eval: '%s' was trained at --image-size %lld; evaluating at %lld as asked\n",
                o.load.c_str(), static_cast<long long>(t.image_size),
                static_cast<long long>(o.data.image_size));
  }
  if (!o.data_given) {
    if (t.data == "synthetic" && !o.data.dir.empty()) {
      throw UsageError(trained + "on --data synthetic, and --data-dir is for fashion-mnist; " +
                       "give --data fashion-mnist to evaluate on those files");
    }
    o.data.name = t.data;
  } else if (o.data.name != t.data) {
    std::printf("eval: '%s' was trained on --data %s; evaluating on %s as asked\n", o.load.c_str(),
                t.data.c_str(), o.data.name.c_str());
  }
}

}  // namespace

int cmd_eval(const std::vector<std::string>& argv) {
  EvalOptions o = parse_eval_options(argv);
  if (o.help) {
    std::puts(
        "usage: frugal eval --load PATH [--model mobilenet_v2] [--data fashion-mnist]\n"
        "       [--data-dir DIR] [--batch 256] [--width 1.0] [--image-size 32]\n"
        "       [--test-limit N] [--device auto] [--workers 2]\n"
        "  Loads a file written by `frugal train --save` (or a model's safetensors weights)\n"
        "  and prints the test accuracy. Only the test files of the data set are read.\n"
        "  A checkpoint's model, width, image size and data set are the defaults; another\n"
        "  --model or --width is refused, another --image-size or --data said.");
    return 0;
  }
  const Device device = resolve_device("eval", o.device);
  check_input_file("eval", "load", o.load);
  const train::Metadata metadata = train::load_safetensors(o.load).metadata;
  const bool is_checkpoint = metadata.count("frugal.format") != 0;
  if (std::optional<TrainedWith> t = TrainedWith::from(metadata, o.load)) {
    apply_trained_with(*t, o);
  }
  train::DataSplits splits = train::make_data(o.data);

  models::ModelConfig mc;
  mc.num_classes = splits.num_classes;
  mc.in_channels = splits.test->sample_shape()[2];
  mc.width = o.width;
  auto model = models::create(o.model, mc);
  model->to(device);
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
