// Each command's flags parsed into one struct by a pure function: nothing is opened, no device is
// asked, nothing runs. A bad flag is a UsageError naming the command, the flag and the bad text,
// so the tests and the fuzz target (fuzz/cli) exercise all of the parsing without training.
//
//   TrainOptions o = parse_train_options({"--epochs", "3", "--save", "ckpt.safetensors"});
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "dist/launcher.h"
#include "models/model_config.h"
#include "tools/args.h"
#include "train/datasets.h"
#include "train/precision_compare.h"
#include "train/release_scheduler.h"

namespace frugal::tools {

// Bounds on sizes and counts: far above any real run, far below anything that overflows when
// multiplied (epochs * steps per epoch, batch * image elements).
constexpr int64_t kMaxBatch = int64_t{1} << 20;
constexpr int64_t kMaxEpochs = 1'000'000;
// --limit and --test-limit: a synthetic set of N samples draws a permutation of N int64 an epoch
// (8 GiB at this bound), so a larger N could only end in running out of host memory.
constexpr int64_t kMaxSamples = int64_t{1} << 30;
constexpr int64_t kMaxSteps = 1'000'000'000;
constexpr int64_t kMaxImageSize = 4096;
constexpr int64_t kMaxWorkers = 256;
constexpr int64_t kMaxClasses = 1'000'000;
constexpr double kMaxWidth = 16.0;

struct TrainOptions {
  bool help = false;
  std::string model = "mobilenet_v2";
  train::DataConfig data;  // name, dir, image_size, limit, test_limit, augment
  int64_t epochs = 1, batch = 128;
  double lr = 0.05, momentum = 0.9;
  double weight_decay = 4e-5;  // 0.01 for adamw unless given
  std::string optimizer = "sgd", schedule = "none";
  double warmup_epochs = 0, label_smoothing = 0;
  models::ModelConfig model_config;  // width, checkpoint, recompute_depthwise
  std::string device = "auto";       // checked as text; resolve_device asks for the device
  int workers = 2;
  uint64_t seed = 0;
  bool seed_given = false;   // --seed was on the command line (else seed is the default 0)
  std::string save, resume;  // empty: not given
  DType precision = DType::f32;
  bool graph = false, oom_recover = false, planner = true;
  bool deterministic = false;  // --deterministic: set_deterministic(true) before anything runs
  std::optional<int64_t> memory_budget;
  std::string memory_log, memory_svg, memory_trace;
  train::ReleasePolicy release;
  int64_t gpus = 0;      // --gpus N: N ranks on this node's GPUs (0: this process alone)
  bool sync_bn = false;  // --sync-bn: batch statistics over every rank's batch
  std::string loss_log;  // --loss-log PATH: every step's loss (the mean over ranks), CSV
  DType reduce_precision = DType::f32;  // --reduce-precision: the dtype gradients travel in
  int64_t micro_batches = 1;            // --micro-batches N: gradient accumulation over N slices
};
TrainOptions parse_train_options(const std::vector<std::string>& argv);
// What each rank of `frugal train --gpus N ARGS` runs: `train ARGS` without --gpus, on the GPUs
// (--device cuda unless ARGS name a CUDA device; --device cpu is refused).
std::vector<std::string> rank_args_for_gpus(const std::vector<std::string>& argv);

struct EvalOptions {
  bool help = false;
  std::string load, model = "mobilenet_v2";
  train::DataConfig data;  // test files only
  int64_t batch = 256;
  double width = 1.0;
  std::string device = "auto";
  int workers = 2;
  // Given on the command line, not defaults: a checkpoint's own values replace only defaults
  // (Note [What eval takes from a checkpoint] in tools/trained_with.h).
  bool model_given = false, width_given = false, image_size_given = false, data_given = false;
};
EvalOptions parse_eval_options(const std::vector<std::string>& argv);

struct CompareCommand {
  bool help = false;
  train::CompareOptions options;  // its device still cpu: see device_flag
  std::string device_flag = "auto";
  std::string json, svg;
  bool deterministic = false;  // --deterministic
};
CompareCommand parse_compare_options(const std::vector<std::string>& argv);

struct EstimateOptions {
  bool help = false;
  std::string model = "mobilenet_v2";
  int64_t batch = 128;
  InputShape input{3, 224, 224};
  DType precision = DType::f16;
  models::ModelConfig model_config;  // classes, channels, width, checkpoint, recompute_depthwise
  std::string device = "cuda", optimizer = "sgd", json;
  bool measure = false, per_module = false, max_batch = false;
  int64_t memory_budget = int64_t{4} << 30, granularity = 16;
  int64_t gpus = 1;  // --gpus N: one rank's step of N data-parallel ranks (buckets counted)
};
EstimateOptions parse_estimate_options(const std::vector<std::string>& argv);

struct SmiOptions {
  bool help = false;
  int64_t loop_seconds = 0, count = 1;  // count 0: until interrupted
};
SmiOptions parse_smi_options(const std::vector<std::string>& argv);

// `frugal launch --nproc N [flags] -- COMMAND...`: the flags before `--`, the ranks' command
// after it (its first word still as typed: cmd_launch turns `frugal` into this executable).
struct LaunchCommand {
  bool help = false;
  dist::LaunchOptions options;
};
LaunchCommand parse_launch_options(const std::vector<std::string>& argv);

// The device a --device flag names once the machine is asked: "auto" is cuda:0 when a CUDA
// device is present, else cpu. A CUDA device that is not there is a UsageError that says so
// plainly and names --device cpu, instead of a driver error code from the first allocation.
Device resolve_device(const std::string& command, const std::string& flag);

// Checks made before a command runs, so that a bad output path fails in a second rather than
// after hours of training; each a UsageError naming the command, the flag, the path and why.
// --save (and anything else replaced atomically): train::save_target_problem (Note [Save targets]).
void check_save_path(const std::string& command, const std::string& flag, const std::string& path);
// Reports written in place (--json, --memory-log, ...): not a directory, its folder exists, and
// it opens for writing (a device such as /dev/stdout is fine; a FIFO without a reader is not).
void check_output_path(const std::string& command, const std::string& flag,
                       const std::string& path);
// Files read whole (--resume, --load): a readable regular file, not a directory, a FIFO (whose
// read would block) or a device such as /dev/zero (whose read never ends).
void check_input_file(const std::string& command, const std::string& flag, const std::string& path);

}  // namespace frugal::tools
