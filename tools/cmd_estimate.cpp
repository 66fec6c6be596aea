// frugal estimate: what a model's training forward keeps for backward, per module, and the peak
// of a whole training step with what it is made of and where it falls, measured on the meta
// device (shapes only) or the CPU (train/saved_estimate.h).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "train/saved_estimate.h"

namespace frugal::tools {
namespace {

constexpr const char* kHelp =
    "usage: frugal estimate [flags]\n"
    "  Runs one training forward of a zoo model on the meta device (shapes and byte counts,\n"
    "  no data) and prints what it keeps for backward, each stored tensor counted once, beside\n"
    "  the one-tensor-per-layer bound (every conv output once, in its compute dtype).\n"
    "  With --checkpoint, checkpointed blocks keep only their inputs and their convs record\n"
    "  nothing in the forward, so the bound counts only the convs outside them.\n"
    "  --model NAME      mobilenet_v2 (default), mobilenet_v1, efficientnet_b0, resnet18\n"
    "  --batch N         default 128\n"
    "  --input CxHxW     default 3x224x224\n"
    "  --classes K       default 1000\n"
    "  --width X         model width multiplier, default 1.0\n"
    "  --precision f32|f16|bf16   autocast dtype of the forward, default f16\n"
    "  --checkpoint none|blocks|N default none\n"
    "  --recompute-depthwise  recompute each inverted-residual block's depthwise output in\n"
    "                    backward instead of keeping it (less than one tensor per layer)\n"
    "  --device meta|cpu where to run the forward, default meta\n"
    "  --optimizer sgd|adamw   the step whose peak is measured too (two steps run, the second\n"
    "                    measured: optimizer state exists then), default sgd (momentum 0.9)\n"
    "  --per-module      one row per module (features.0, features.1, ...)\n"
    "  --json PATH       write the totals and rows as JSON\n";

}  // namespace

int cmd_estimate(const std::vector<std::string>& argv) {
  Args args("estimate", argv,
            {"model", "batch", "input", "classes", "width", "precision", "checkpoint", "device",
             "json", "optimizer"},
            {"help", "per-module", "recompute-depthwise"});
  if (args.flag("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::string model_name = checked_model_name("estimate", args.str("model", "mobilenet_v2"));
  const int64_t batch = args.integer("batch", 128, 1);
  const InputShape in = parse_input_shape("estimate", args.str("input", "3x224x224"));
  const DType precision = parse_precision("estimate", args.str("precision", "f16"));
  const std::string device_flag = args.str("device", "meta");
  if (device_flag != "meta" && device_flag != "cpu") {
    throw UsageError("estimate: --device expects meta or cpu, got '" + device_flag + "'");
  }
  models::ModelConfig mc;
  mc.num_classes = args.integer("classes", 1000, 2);
  mc.in_channels = in.c;
  mc.width = args.number("width", 1.0);
  mc.checkpoint = parse_checkpoint("estimate", args.str("checkpoint", "none"));
  mc.recompute_depthwise = args.flag("recompute-depthwise");
  const std::string optimizer = args.str("optimizer", "sgd");
  if (optimizer != "sgd" && optimizer != "adamw") {
    throw UsageError("estimate: --optimizer expects sgd or adamw, got '" + optimizer + "'");
  }
  auto model = models::create(model_name, mc);
  model->to(device_flag == "meta" ? Device::meta() : Device::cpu());
  const Shape input{batch, in.h, in.w, in.c};
  const train::SavedEstimate e = train::estimate_saved(*model, input, precision);
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer == "sgd") {
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SgdOptions{.momentum = 0.9});
  } else {
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{});
  }
  const train::StepMemory step =
      train::estimate_step_memory(*model, *opt, input, mc.num_classes, precision);
  std::printf("%s (width %.2f), batch %lld, input %lldx%lldx%lld, %s, checkpoint %s%s, on %s\n",
              model_name.c_str(), mc.width, static_cast<long long>(batch),
              static_cast<long long>(in.c), static_cast<long long>(in.h),
              static_cast<long long>(in.w), dtype_name(precision), mc.checkpoint.str().c_str(),
              mc.recompute_depthwise ? ", depthwise recomputed" : "", device_flag.c_str());
  constexpr double kMiB = 1024.0 * 1024.0;
  if (args.flag("per-module")) {
    std::fputs(train::saved_table(e).c_str(), stdout);
  } else {
    std::printf("saved for backward %.2f MiB, one tensor per conv layer %.2f MiB\n",
                e.saved_bytes / kMiB, e.conv_output_bytes / kMiB);
  }
  std::printf("training step (%s, %s): ", optimizer.c_str(),
              device_flag == "meta" ? "kernel workspace not counted on meta" : "measured");
  std::fputs(train::step_table(step).c_str(), stdout);
  if (args.has("json")) {
    nlohmann::ordered_json j;
    j["model"] = model_name;
    j["batch"] = batch;
    j["precision"] = dtype_name(precision);
    j["checkpoint"] = mc.checkpoint.str();
    j["recompute_depthwise"] = mc.recompute_depthwise;
    j["saved_bytes"] = e.saved_bytes;
    j["peak_allocated_bytes"] = step.peak.bytes;
    j["peak_phase"] = memory::phase_name(step.peak.phase);
    j["peak_module"] = step.peak.module;
    j["conv_output_bytes"] = e.conv_output_bytes;
    for (const auto& m : e.modules) {
      j["modules"].push_back({{"module", m.module},
                              {"saved_bytes", m.saved_bytes},
                              {"conv_output_bytes", m.conv_output_bytes}});
    }
    const std::string path = args.str("json", "");
    std::ofstream f(path);
    f << j.dump(2) << "\n";
    FRUGAL_CHECK(f.good(), "estimate: cannot write ", path);
  }
  return 0;
}

}  // namespace frugal::tools
