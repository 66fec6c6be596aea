// `frugal compare`: trains the same model from the same seed in f32, f16 and bf16 and prints peak
// memory, img/s and loss with their ratios to f32; optionally writes JSON and an SVG bar chart.
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "base/deterministic.h"
#include "base/error.h"
#include "kernels/context.h"
#include "models/registry.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "train/precision_compare.h"

namespace frugal::tools {
namespace {

constexpr const char* kHelp =
    "usage: frugal compare [flags]\n"
    "  Trains the same model from the same seed on one fixed random batch in f32, f16 (autocast\n"
    "  + loss scaling) and bf16 (autocast) with SGD (momentum 0.9, lr 0.05), and prints peak\n"
    "  allocated/reserved memory, img/s (median step) and the last loss, each with its ratio\n"
    "  to f32. Peaks count from right after the model is built: parameters, gradients,\n"
    "  momentum, the batch and activations.\n"
    "  --model NAME      mobilenet_v2 (default), mobilenet_v1, efficientnet_b0, resnet18\n"
    "  --batch N         default 128\n"
    "  --input CxHxW     default 3x224x224\n"
    "  --classes K       default 1000\n"
    "  --width X         model width multiplier, default 1.0\n"
    "  --steps N         timed steps, default 20\n"
    "  --warmup N        untimed steps first, default 3\n"
    "  --seed N          default 0\n"
    "  --deterministic   fixed cuDNN algorithms, never chosen by timing: bit-identical runs\n"
    "  --device auto|cpu|cuda|cuda:N   default auto (CUDA when present)\n"
    "  --json PATH       write the rows as JSON\n"
    "  --svg PATH        write a bar chart (ratios to f32) as SVG\n"
    "  --graph           replay the timed steps from a CUDA graph captured in the last warm-up\n"
    "                    step (one launch a step instead of hundreds; eager on the CPU)\n"
    "  --checkpoint none|blocks|first:K|N   activation checkpointing: none (default), every\n"
    "                    block, the first K blocks, or N segments of the feature layers\n"
    "                    (nn/checkpoint.h)\n"
    "  --recompute-depthwise  recompute each inverted-residual block's depthwise output in\n"
    "                    backward instead of keeping it (less than one tensor per layer)\n"
    "  --planner on|off  plan each step's memory before the first step and replay it from one\n"
    "                    arena (on, the default, on CUDA; train/step_planner.h)\n";

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  FRUGAL_CHECK(f.good(), "compare: cannot write ", path);
}

}  // namespace

int cmd_compare(const std::vector<std::string>& argv) {
  Args args("compare", argv,
            {"model", "batch", "input", "classes", "width", "steps", "warmup", "seed", "device",
             "json", "svg", "checkpoint", "planner"},
            {"help", "graph", "recompute-depthwise", "deterministic"});
  if (args.flag("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (args.flag("deterministic")) set_deterministic(true);
  train::CompareOptions o;
  o.model = checked_model_name("compare", args.str("model", "mobilenet_v2"));
  o.batch = args.integer("batch", 128, 1);
  const InputShape in = parse_input_shape("compare", args.str("input", "3x224x224"));
  o.channels = in.c, o.height = in.h, o.width = in.w;
  o.classes = args.integer("classes", 1000, 2);
  o.width_multiplier = args.number("width", 1.0);
  if (!(o.width_multiplier > 0)) {
    throw UsageError("compare: --width expects a positive number, got '" + args.str("width", "") +
                     "'");
  }
  o.steps = args.integer("steps", 20, 1);
  o.warmup = args.integer("warmup", 3, 0);
  o.seed = static_cast<uint64_t>(args.integer("seed", 0, 0));
  o.graph = args.flag("graph");
  o.checkpoint = parse_checkpoint("compare", args.str("checkpoint", "none"));
  o.planner = parse_planner("compare", args.str("planner", "on"));
  o.recompute_depthwise = args.flag("recompute-depthwise");
  if (o.graph && o.warmup < 2) {
    throw UsageError(
        "compare: --graph captures in the last warm-up step after an eager one: "
        "needs --warmup 2 or more");
  }
  const std::string device_flag = args.str("device", "auto");
  try {
    o.device = parse_device(resolve_device(device_flag));
  } catch (const Error&) {
    throw UsageError("compare: --device expects auto, cpu, cuda or cuda:N, got '" + device_flag +
                     "'");
  }
  if (!o.device.is_cpu() && !o.device.is_cuda()) {
    throw UsageError("compare: --device " + o.device.str() +
                     " has no clock to time; use cpu or cuda");
  }
  if (o.device.is_cuda() && o.device.index >= kernels::cuda_device_count()) {
    throw UsageError("compare: --device " + o.device.str() + ": no such CUDA device");
  }
  // Fail on an unwritable output before the runs, not after them.
  for (const char* flag : {"json", "svg"}) {
    if (args.has(flag) && !std::ofstream(args.str(flag, ""), std::ios::app)) {
      throw UsageError(std::string("compare: cannot write --") + flag + " " + args.str(flag, ""));
    }
  }

  std::fprintf(stderr, "comparing f32, f16 and bf16 on %s...\n", o.device.str().c_str());
  const std::vector<train::CompareRow> rows = train::compare_precisions(o);
  std::fputs(train::to_table(o, rows).c_str(), stdout);
  if (args.has("json")) {
    write_file(args.str("json", ""), train::to_json(o, rows));
    std::printf("wrote %s\n", args.str("json", "").c_str());
  }
  if (args.has("svg")) {
    write_file(args.str("svg", ""), train::to_svg(o, rows));
    std::printf("wrote %s\n", args.str("svg", "").c_str());
  }
  return 0;
}

}  // namespace frugal::tools
