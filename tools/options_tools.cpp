// `frugal compare`, `frugal estimate` and `frugal smi` flags into their option structs, every
// value checked here and nowhere later.
#include "tools/options.h"

namespace frugal::tools {

CompareCommand parse_compare_options(const std::vector<std::string>& argv) {
  Args args("compare", argv,
            {"model", "batch", "input", "classes", "width", "steps", "warmup", "seed", "device",
             "json", "svg", "checkpoint", "planner"},
            {"help", "graph", "recompute-depthwise", "deterministic"});
  CompareCommand c;
  c.help = args.flag("help");
  if (c.help) return c;
  train::CompareOptions& o = c.options;
  o.model = checked_model_name("compare", args.str("model", "mobilenet_v2"));
  o.batch = args.integer("batch", 128, 1, kMaxBatch);
  const InputShape in = parse_input_shape("compare", args.str("input", "3x224x224"));
  check_batch_elements("compare", o.batch, in);
  o.channels = in.c, o.height = in.h, o.width = in.w;
  o.classes = args.integer("classes", 1000, 2, kMaxClasses);
  o.width_multiplier = args.number("width", 1.0, 1.0 / 64, kMaxWidth);
  o.steps = args.integer("steps", 20, 1, kMaxSteps);
  o.warmup = args.integer("warmup", 3, 0, kMaxSteps);
  o.seed = static_cast<uint64_t>(args.integer("seed", 0, 0, INT64_MAX));
  o.graph = args.flag("graph");
  c.deterministic = args.flag("deterministic");
  o.checkpoint = parse_checkpoint("compare", args.str("checkpoint", "none"));
  o.planner = parse_planner("compare", args.str("planner", "on"));
  o.recompute_depthwise = args.flag("recompute-depthwise");
  if (o.graph && o.warmup < 2) {
    throw UsageError(
        "compare: --graph captures in the last warm-up step after an eager one: "
        "needs --warmup 2 or more");
  }
  c.device_flag = args.str("device", "auto");
  if (c.device_flag != "auto" && c.device_flag != "cpu") {
    bool cuda = false;
    try {
      cuda = parse_device(c.device_flag).is_cuda();
    } catch (const Error&) {
    }
    if (!cuda) {
      throw UsageError(
          "compare: --device expects auto, cpu, cuda or cuda:N (a device with a "
          "clock to time), got '" +
          c.device_flag + "'");
    }
  }
  c.json = args.path("json");
  c.svg = args.path("svg");
  return c;
}

EstimateOptions parse_estimate_options(const std::vector<std::string>& argv) {
  Args args("estimate", argv,
            {"model", "batch", "input", "classes", "width", "precision", "checkpoint", "device",
             "json", "optimizer", "memory-budget", "granularity", "gpus"},
            {"help", "per-module", "recompute-depthwise", "max-batch", "measure"});
  EstimateOptions o;
  o.help = args.flag("help");
  if (o.help) return o;
  o.model = checked_model_name("estimate", args.str("model", "mobilenet_v2"));
  o.batch = args.integer("batch", 128, 1, kMaxBatch);
  o.input = parse_input_shape("estimate", args.str("input", "3x224x224"));
  check_batch_elements("estimate", o.batch, o.input);
  o.precision = parse_precision("estimate", args.str("precision", "f16"));
  // The device whose allocator is predicted; the step itself runs on meta, or with --measure on
  // the CPU (whose allocator then measures it).
  o.device = args.str("device", "cuda");
  if (o.device != "cuda" && o.device != "cpu") {
    throw UsageError("estimate: --device expects cuda or cpu, got '" + o.device + "'");
  }
  o.measure = args.flag("measure");
  if (o.measure && o.device != "cpu") {
    throw UsageError("estimate: --measure runs the step on the CPU: it needs --device cpu");
  }
  o.gpus = args.integer("gpus", 1, 1, dist::kMaxProcs);
  o.model_config.num_classes = args.integer("classes", 1000, 2, kMaxClasses);
  o.model_config.in_channels = o.input.c;
  o.model_config.width = args.number("width", 1.0, 1.0 / 64, kMaxWidth);
  o.model_config.checkpoint = parse_checkpoint("estimate", args.str("checkpoint", "none"));
  o.model_config.recompute_depthwise = args.flag("recompute-depthwise");
  o.optimizer = args.str("optimizer", "sgd");
  if (o.optimizer != "sgd" && o.optimizer != "adamw") {
    throw UsageError("estimate: --optimizer expects sgd or adamw, got '" + o.optimizer + "'");
  }
  o.per_module = args.flag("per-module");
  o.max_batch = args.flag("max-batch");
  if (o.max_batch) {
    // --max-batch predicts CUDA's allocator for one GPU, searches the batch and tries every way
    // of training itself: these flags would be ignored without a word.
    for (const char* flag : {"batch", "device", "gpus", "json", "checkpoint", "measure",
                             "per-module", "recompute-depthwise"}) {
      if (args.has(flag) || args.flag(flag)) {
        throw UsageError(std::string("estimate: --max-batch predicts one CUDA device for every ") +
                         "batch and every way of training; leave out --" + flag);
      }
    }
  }
  o.memory_budget = parse_bytes("estimate", "memory-budget", args.str("memory-budget", "4GiB"));
  o.granularity = args.integer("granularity", 16, 1, kMaxBatch);
  for (const char* flag : {"memory-budget", "granularity"}) {
    if (!o.max_batch && args.has(flag)) {
      throw UsageError(std::string("estimate: --") + flag +
                       " bounds the batch that --max-batch searches for; add --max-batch or "
                       "leave out --" +
                       flag);
    }
  }
  o.json = args.path("json");
  return o;
}

SmiOptions parse_smi_options(const std::vector<std::string>& argv) {
  std::vector<std::string> flags = argv;
  for (std::string& a : flags) {
    if (a == "-l") a = "--loop";  // nvidia-smi's spelling
  }
  Args args("smi", flags, {"loop", "count"}, {"help"});
  SmiOptions o;
  o.help = args.flag("help");
  if (o.help) return o;
  o.loop_seconds = args.integer("loop", 0, 1, 86'400);
  o.count = args.integer("count", o.loop_seconds > 0 ? 0 : 1, 1, INT64_MAX);
  return o;
}

}  // namespace frugal::tools
