// `frugal compare`: trains the same model from the same seed in f32, f16 and bf16 and prints peak
// memory, img/s and loss with their ratios to f32; optionally writes JSON and an SVG bar chart.
#include <cstdio>
#include <fstream>

#include "base/deterministic.h"
#include "base/error.h"
#include "tools/commands.h"
#include "tools/options.h"
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
    "                    step (one launch a step instead of hundreds; eager on the CPU); with\n"
    "                    the planner on, the capture lives in its arena\n"
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
  CompareCommand c = parse_compare_options(argv);
  if (c.help) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (c.deterministic) set_deterministic(true);
  train::CompareOptions& o = c.options;
  o.device = resolve_device("compare", c.device_flag);
  // Fail on an unwritable output before the runs, not after them.
  for (const auto& [flag, path] : {std::pair{"json", c.json}, std::pair{"svg", c.svg}}) {
    if (!path.empty()) check_output_path("compare", flag, path);
  }

  std::fprintf(stderr, "comparing f32, f16 and bf16 on %s...\n", o.device.str().c_str());
  const std::vector<train::CompareRow> rows = train::compare_precisions(o);
  std::fputs(train::to_table(o, rows).c_str(), stdout);
  if (!c.json.empty()) {
    write_file(c.json, train::to_json(o, rows));
    std::printf("wrote %s\n", c.json.c_str());
  }
  if (!c.svg.empty()) {
    write_file(c.svg, train::to_svg(o, rows));
    std::printf("wrote %s\n", c.svg.c_str());
  }
  return 0;
}

}  // namespace frugal::tools
