// frugal estimate: what a model's training forward keeps for backward, per module, and the peak
// of a whole training step with what it is made of and where it falls, measured on the meta
// device (shapes only) or the CPU (train/saved_estimate.h, train/memory_estimate.h); with
// --max-batch, the largest batch under a memory budget for each way of training.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "dist/data_parallel.h"
#include "dist/meta_group.h"
#include "dist/socket_group.h"
#include "models/registry.h"
#include "nn/construction_device.h"
#include "optim/optimizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "train/memory_estimate.h"
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
    "  --checkpoint none|blocks|first:K|N default none\n"
    "  --recompute-depthwise  recompute each inverted-residual block's depthwise output in\n"
    "                    backward instead of keeping it (less than one tensor per layer)\n"
    "  --device cuda|cpu the device whose allocator is predicted (cuda: requests rounded as its\n"
    "                    caching allocator rounds them, cuBLAS's and cuDNN's bounded workspace\n"
    "                    counted), default cuda;\n"
    "                    the step runs on the meta device\n"
    "  --measure         with --device cpu: run the step on the CPU and measure it instead\n"
    "  --optimizer sgd|adamw   the step whose peak is measured too (two steps run, the second\n"
    "                    measured: optimizer state exists then), default sgd (momentum 0.9)\n"
    "  --per-module      one row per module (features.0, features.1, ...)\n"
    "  --json PATH       write the totals, the breakdown at the peak (peak_allocated_bytes) and\n"
    "                    the rows as JSON\n"
    "  --max-batch       instead: the largest batch whose predicted peak fits --memory-budget,\n"
    "                    for the plain step, depthwise outputs recomputed, checkpointed blocks,\n"
    "                    and both (multiples of --granularity, default 16); the step alone:\n"
    "                    frugal train --memory-budget also leaves room for the loader's staged\n"
    "                    batch and 5% headroom for reserved over allocated\n"
    "  --memory-budget SIZE   for --max-batch: bytes, or with KiB, MiB or GiB (e.g. 4GiB)\n"
    "  --gpus N          one rank's step of frugal train --gpus N (--batch images each): the\n"
    "                    model wrapped in DataParallel, its gradient buckets counted\n";

// --max-batch: the largest batch each way of training fits under `budget` bytes, predicted.
int print_max_batches(const std::string& model_name, const models::ModelConfig& base,
                      const InputShape& in, DType precision, const std::string& optimizer,
                      int64_t budget, int64_t granularity) {
  std::printf(
      "%s, input %lldx%lldx%lld, %s, %s: largest batch (a multiple of %lld) whose "
      "predicted peak allocated fits %.1f MiB (the step alone: frugal train --memory-budget "
      "also leaves room for the loader's staged batch and 5%% headroom)\n",
      model_name.c_str(), static_cast<long long>(in.c), static_cast<long long>(in.h),
      static_cast<long long>(in.w), dtype_name(precision), optimizer.c_str(),
      static_cast<long long>(granularity), static_cast<double>(budget) / (1 << 20));
  struct Way {
    const char* name;
    bool recompute;
    const char* checkpoint;
  };
  // As far as --batch goes: a best at that limit may be short of what fits.
  const int64_t limit = kMaxBatch / granularity * granularity;
  for (const Way& w : {Way{"plain", false, "none"}, Way{"--recompute-depthwise", true, "none"},
                       Way{"--checkpoint blocks", false, "blocks"},
                       Way{"--checkpoint blocks --recompute-depthwise", true, "blocks"}}) {
    models::ModelConfig mc = base;
    mc.recompute_depthwise = w.recompute;
    mc.checkpoint = models::CheckpointPolicy::parse(w.checkpoint);
    const int64_t best = train::largest_batch(
        [&](int64_t n) {
          return train::estimate_memory(model_name, mc, Shape{n, in.h, in.w, in.c}, precision,
                                        optimizer, 1, true, /*with_arena=*/false)
              .peak_allocated_bytes;
        },
        budget, granularity, limit);
    std::printf("  %-44s %lld%s\n", w.name, static_cast<long long>(best),
                best == limit ? " or more (the largest --batch)" : "");
  }
  return 0;
}

}  // namespace

int cmd_estimate(const std::vector<std::string>& argv) {
  const EstimateOptions o = parse_estimate_options(argv);
  if (o.help) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::string& model_name = o.model;
  const int64_t batch = o.batch;
  const InputShape& in = o.input;
  const DType precision = o.precision;
  const std::string& device_flag = o.device;
  const bool measure = o.measure;
  const models::ModelConfig& mc = o.model_config;
  const std::string& optimizer = o.optimizer;
  if (o.max_batch) {
    return print_max_batches(model_name, mc, in, precision, optimizer, o.memory_budget,
                             o.granularity);
  }
  if (!o.json.empty()) check_output_path("estimate", "json", o.json);
  std::shared_ptr<nn::Module> model;
  {
    // --measure runs the step on the CPU; a prediction needs only shapes (Note [Building modules
    // on the meta device]).
    nn::ConstructionDeviceGuard on(measure ? Device::cpu() : Device::meta());
    model = models::create(model_name, mc);
  }
  // --gpus: DataParallel over a group that moves nothing but allocates what a real one does (a
  // socket group of one when the CPU measures the step).
  if (o.gpus > 1) {
    std::shared_ptr<dist::ProcessGroup> group;
    if (measure) {
      group = std::make_shared<dist::SocketGroup>(0, 1);
    } else {
      group = std::make_shared<dist::MetaGroup>(static_cast<int>(o.gpus));
    }
    model = std::make_shared<dist::DataParallel>(model, group);
  }
  const Shape input{batch, in.h, in.w, in.c};
  const train::SavedEstimate e = train::estimate_saved(*model, input, precision);
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer == "sgd") {
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SgdOptions{.momentum = 0.9});
  } else {
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{});
  }
  // On meta the prediction counts requests as the CUDA caching allocator rounds them; on the CPU
  // it measures the CPU allocator's bytes.
  const train::MemoryEstimate step = train::estimate_memory(
      *model, *opt, input, mc.num_classes, precision, /*for_cuda=*/device_flag == "cuda");
  std::printf("%s (width %.2f), batch %lld%s, input %lldx%lldx%lld, %s, checkpoint %s%s, %s\n",
              model_name.c_str(), mc.width, static_cast<long long>(batch),
              o.gpus > 1 ? (" per GPU of " + std::to_string(o.gpus)).c_str() : "",
              static_cast<long long>(in.c), static_cast<long long>(in.h),
              static_cast<long long>(in.w), dtype_name(precision), mc.checkpoint.str().c_str(),
              mc.recompute_depthwise ? ", depthwise recomputed" : "",
              measure ? "measured on the CPU" : ("predicted for " + device_flag).c_str());
  constexpr double kMiB = 1024.0 * 1024.0;
  if (o.per_module) {
    std::fputs(train::saved_table(e).c_str(), stdout);
  } else {
    std::printf("saved for backward %.2f MiB, one tensor per conv layer %.2f MiB\n",
                e.saved_bytes / kMiB, e.conv_output_bytes / kMiB);
  }
  std::printf("training step (%s, %s): ", optimizer.c_str(),
              measure                 ? "measured on the CPU"
              : device_flag == "cuda" ? "predicted for CUDA, cuDNN's bounded workspace counted"
                                      : "predicted for the CPU, kernel workspace not counted");
  std::fputs(train::breakdown_table(step).c_str(), stdout);
  if (!o.json.empty()) {
    nlohmann::ordered_json j;
    j["model"] = model_name;
    j["batch"] = batch;
    j["precision"] = dtype_name(precision);
    j["checkpoint"] = mc.checkpoint.str();
    j["recompute_depthwise"] = mc.recompute_depthwise;
    j["saved_bytes"] = e.saved_bytes;
    j["peak_allocated_bytes"] = step.peak_allocated_bytes;
    j["peak_phase"] = memory::phase_name(step.phase);
    j["peak_module"] = step.module;
    const train::MemoryBreakdown& b = step.at_peak;
    j["at_peak"] = {{"parameters", b.parameters},
                    {"gradients", b.gradients},
                    {"optimizer_state", b.optimizer_state},
                    {"saved_activations", b.saved_activations},
                    {"transients", b.transients},
                    {"workspace", b.workspace},
                    {"other", b.other}};
    j["arena_bytes"] = step.arena_bytes;
    j["arena_lower_bound_bytes"] = step.arena_lower_bound;
    j["conv_output_bytes"] = e.conv_output_bytes;
    for (const auto& m : e.modules) {
      j["modules"].push_back({{"module", m.module},
                              {"saved_bytes", m.saved_bytes},
                              {"conv_output_bytes", m.conv_output_bytes}});
    }
    const std::string& path = o.json;
    std::ofstream f(path);
    f << j.dump(2) << "\n";
    FRUGAL_CHECK(f.good(), "estimate: cannot write ", path);
  }
  return 0;
}

}  // namespace frugal::tools
