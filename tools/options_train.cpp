// `frugal train` and `frugal eval` flags into TrainOptions and EvalOptions, every value checked
// here and nowhere later; and resolve_device, the one place that asks for a CUDA device.
#include <limits>

#include "kernels/context.h"
#include "tools/options.h"

namespace frugal::tools {
namespace {

constexpr double kMaxDouble = std::numeric_limits<double>::max();

// --device as text: auto, cpu, cuda or cuda:N (meta is not a device to train on).
std::string checked_device_flag(const std::string& command, const std::string& flag) {
  if (flag == "auto" || flag == "cpu") return flag;
  try {
    if (parse_device(flag).is_cuda()) return flag;
  } catch (const Error&) {
  }
  throw UsageError(command + ": --device expects auto, cpu, cuda or cuda:N, got '" + flag + "'");
}

void one_of(const std::string& command, const std::string& flag, const std::string& value,
            const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) {
    if (value == a) return;
    list += (list.empty() ? "" : ", ") + a;
  }
  throw UsageError(command + ": --" + flag + " expects " + list + ", got '" + value + "'");
}

}  // namespace

TrainOptions parse_train_options(const std::vector<std::string>& argv) {
  Args args("train", argv, {"model",         "data",       "data-dir",      "epochs",
                            "batch",         "lr",         "optimizer",     "momentum",
                            "weight-decay",  "schedule",   "warmup-epochs", "label-smoothing",
                            "width",         "image-size", "limit",         "test-limit",
                            "device",        "workers",    "seed",          "save",
                            "resume",        "precision",  "checkpoint",    "planner",
                            "memory-budget", "memory-log", "memory-svg",    "release",
                            "memory-trace",  "gpus",       "loss-log",      "reduce-precision",
                            "micro-batches"},
            {"help", "no-augment", "graph", "recompute-depthwise", "oom-recover", "deterministic",
             "sync-bn"});
  TrainOptions o;
  o.help = args.flag("help");
  if (o.help) return o;
  o.model = checked_model_name("train", args.str("model", o.model));
  o.epochs = args.integer("epochs", 1, 1, kMaxEpochs);
  o.batch = args.integer("batch", 128, 1, kMaxBatch);
  o.lr = args.number("lr", 0.05, 0, kMaxDouble);
  o.optimizer = args.str("optimizer", "sgd");
  one_of("train", "optimizer", o.optimizer, {"sgd", "adamw"});
  o.momentum = args.number("momentum", 0.9, 0, 1);
  // Flags that would be accepted and then ignored are refused, as --max-batch's are: a run that
  // silently trains otherwise than asked is worse than one that does not start.
  if (args.has("momentum") && o.optimizer != "sgd") {
    throw UsageError("train: --momentum is SGD's; --optimizer " + o.optimizer +
                     " has none (its betas are 0.9 and 0.999)");
  }
  o.weight_decay = args.number("weight-decay", o.optimizer == "sgd" ? 4e-5 : 0.01, 0, kMaxDouble);
  o.schedule = args.str("schedule", "none");
  one_of("train", "schedule", o.schedule, {"none", "cosine", "step"});
  o.warmup_epochs = args.number("warmup-epochs", 0, 0, static_cast<double>(o.epochs));
  if (args.has("warmup-epochs") && o.schedule != "cosine") {
    throw UsageError("train: --warmup-epochs warms up --schedule cosine; --schedule " + o.schedule +
                     " has no warm-up");
  }
  o.label_smoothing = args.number("label-smoothing", 0, 0, 1);
  o.data.name = args.str("data", "fashion-mnist");
  one_of("train", "data", o.data.name, {"fashion-mnist", "synthetic"});
  o.data.dir = args.path("data-dir");
  o.data.image_size = args.integer("image-size", 32, 8, kMaxImageSize);
  o.data.limit = args.integer("limit", -1, 1, kMaxSamples);
  o.data.test_limit = args.integer("test-limit", -1, 1, kMaxSamples);
  o.data.augment = !args.flag("no-augment");
  if (o.data.name == "synthetic") {
    for (const char* flag : {"data-dir", "no-augment"}) {
      if (args.has(flag) || args.flag(flag)) {
        throw UsageError(std::string("train: --") + flag +
                         " is for fashion-mnist; --data synthetic makes its images and does "
                         "not augment them");
      }
    }
  }
  o.model_config.width = args.number("width", 1.0, 1.0 / 64, kMaxWidth);
  o.model_config.checkpoint = parse_checkpoint("train", args.str("checkpoint", "none"));
  o.model_config.recompute_depthwise = args.flag("recompute-depthwise");
  o.device = checked_device_flag("train", args.str("device", "auto"));
  o.workers = static_cast<int>(args.integer("workers", 2, 0, kMaxWorkers));
  o.seed = static_cast<uint64_t>(args.integer("seed", 0, 0, INT64_MAX));
  o.seed_given = args.has("seed");
  o.save = args.path("save");
  o.resume = args.path("resume");
  o.precision = parse_precision("train", args.str("precision", "f32"));
  o.graph = args.flag("graph");
  o.oom_recover = args.flag("oom-recover");
  o.deterministic = args.flag("deterministic");
  if (o.graph && o.oom_recover) {
    throw UsageError(
        "train: --oom-recover cannot undo a step replayed from a CUDA graph; "
        "leave out --graph or --oom-recover");
  }
  o.planner = parse_planner("train", args.str("planner", "on"));
  o.gpus = args.integer("gpus", 0, 1, dist::kMaxProcs);
  o.sync_bn = args.flag("sync-bn");
  o.loss_log = args.path("loss-log");
  o.reduce_precision = parse_precision("train", args.str("reduce-precision", "f32"));
  o.micro_batches = args.integer("micro-batches", 1, 1, o.batch);
  if (args.has("micro-batches") && args.has("memory-budget")) {
    throw UsageError(
        "train: --memory-budget chooses the micro-batches itself; leave out one of "
        "--micro-batches and --memory-budget");
  }
  if (args.has("memory-budget")) {
    o.memory_budget = parse_bytes("train", "memory-budget", args.str("memory-budget", ""));
  }
  o.memory_log = args.path("memory-log");
  o.memory_svg = args.path("memory-svg");
  o.memory_trace = args.path("memory-trace");
  try {
    o.release = train::ReleasePolicy::parse(args.str("release", "off"));
  } catch (const Error&) {
    throw UsageError(
        "train: --release expects off, epoch, threshold, threshold:F with F in "
        "(0, 1] or adaptive, got '" +
        args.str("release", "") + "'");
  }
  return o;
}

std::vector<std::string> rank_args_for_gpus(const std::vector<std::string>& argv) {
  std::vector<std::string> out{"train"};
  bool device_given = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--gpus") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--gpus=", 0) == 0) continue;
    std::string device;
    if (a == "--device" && i + 1 < argv.size()) device = argv[i + 1];
    if (a.rfind("--device=", 0) == 0) device = a.substr(9);
    if (!device.empty()) {
      device_given = true;
      if (device.rfind("cuda", 0) != 0 && device != "auto") {
        throw UsageError("train: --gpus runs one rank per GPU; --device " + device +
                         " contradicts it (use frugal launch --nproc N for CPU ranks)");
      }
    }
    out.push_back(a);
  }
  if (!device_given) {
    out.push_back("--device");
    out.push_back("cuda");
  }
  return out;
}

EvalOptions parse_eval_options(const std::vector<std::string>& argv) {
  Args args("eval", argv,
            {"model", "load", "data", "data-dir", "batch", "width", "image-size", "test-limit",
             "device", "workers"},
            {"help"});
  EvalOptions o;
  o.help = args.flag("help");
  if (o.help) return o;
  o.load = args.path("load");
  if (o.load.empty()) throw UsageError("eval: --load PATH is required");
  o.model = checked_model_name("eval", args.str("model", o.model));
  o.data.name = args.str("data", "fashion-mnist");
  one_of("eval", "data", o.data.name, {"fashion-mnist", "synthetic"});
  o.data.dir = args.path("data-dir");
  if (o.data.name == "synthetic" && args.has("data-dir")) {
    throw UsageError("eval: --data-dir is for fashion-mnist; --data synthetic makes its images");
  }
  o.data.image_size = args.integer("image-size", 32, 8, kMaxImageSize);
  o.data.limit = 0;
  o.data.test_limit = args.integer("test-limit", -1, 1, kMaxSamples);
  o.data.need_train = false;  // eval reads the test files only
  o.batch = args.integer("batch", 256, 1, kMaxBatch);
  o.width = args.number("width", 1.0, 1.0 / 64, kMaxWidth);
  o.device = checked_device_flag("eval", args.str("device", "auto"));
  o.workers = static_cast<int>(args.integer("workers", 2, 0, kMaxWorkers));
  o.model_given = args.has("model");
  o.width_given = args.has("width");
  o.image_size_given = args.has("image-size");
  o.data_given = args.has("data");
  return o;
}

Device resolve_device(const std::string& command, const std::string& flag) {
  const int count = kernels::cuda_device_count();
  if (flag == "auto") return count > 0 ? Device::cuda(0) : Device::cpu();
  const Device d = parse_device(flag);
  if (d.is_cuda() && d.index >= count) {
    throw UsageError(command + ": --device " + flag + ": " +
                     (count == 0 ? std::string("no CUDA device is present")
                                 : "there are only " + std::to_string(count) + " CUDA devices") +
                     "; use --device cpu (or auto, which picks a GPU when there is one)");
  }
  return d;
}

}  // namespace frugal::tools
