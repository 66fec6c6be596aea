// `frugal train`: build model, data and optimizer from flags, train with a progress bar, report
// test accuracy, time and memory per epoch, and save/resume checkpoints.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>

#include "base/deterministic.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "data/loader.h"
#include "data/shuffle.h"
#include "dist/data_parallel.h"
#include "dist/env.h"
#include "dist/init.h"
#include "dist/launcher.h"
#include "dist/meta_group.h"
#include "dist/sync_batch_norm.h"
#include "kernels/context.h"
#include "memory/allocation_trace.h"
#include "memory/allocator.h"
#include "memory/caching_allocator.h"
#include "memory/live_tags.h"
#include "memory/nvml.h"
#include "memory/published_stats.h"
#include "models/checkpoint_in_place.h"
#include "models/registry.h"
#include "nn/construction_device.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "tools/commands.h"
#include "tools/loss_log.h"
#include "tools/options.h"
#include "tools/trained_with.h"
#include "train/checkpoint.h"
#include "train/datasets.h"
#include "train/memory_budget.h"
#include "train/memory_monitor.h"
#include "train/oom_recovery.h"
#include "train/release_scheduler.h"
#include "train/trainer.h"

namespace frugal::tools {
namespace {

constexpr const char* kHelp =
    "usage: frugal train [flags]\n"
    "  --model NAME          mobilenet_v2 (default), mobilenet_v1, efficientnet_b0, resnet18\n"
    "  --data NAME           fashion-mnist (default) or synthetic\n"
    "  --data-dir DIR        folder with the four Fashion-MNIST .gz files\n"
    "  --epochs N            default 1\n"
    "  --batch N             default 128\n"
    "  --lr X                default 0.05\n"
    "  --optimizer sgd|adamw default sgd (momentum 0.9)\n"
    "  --momentum X          SGD momentum, default 0.9\n"
    "  --weight-decay X      default 4e-5 (sgd) / 0.01 (adamw)\n"
    "  --schedule none|cosine|step   default none; cosine warms up for --warmup-epochs\n"
    "  --warmup-epochs X     default 0\n"
    "  --label-smoothing X   default 0\n"
    "  --width X             model width multiplier, default 1.0\n"
    "  --image-size N        side of the (resized) input, default 32\n"
    "  --limit N             train on the first N samples only (synthetic: N samples)\n"
    "  --test-limit N        evaluate on the first N test samples only (synthetic: N)\n"
    "  --device auto|cpu|cuda|cuda:N   default auto (CUDA when present)\n"
    "  --workers N           loader threads, default 2\n"
    "  --seed N              default 0\n"
    "  --deterministic       bit-identical runs for one seed on one machine: fixed cuDNN\n"
    "                        algorithms, never chosen by timing (FRUGAL_DETERMINISTIC=1 too)\n"
    "  --save PATH           write a checkpoint after every epoch\n"
    "  --resume PATH         continue from a checkpoint written by --save (with its --seed;\n"
    "                        another --precision keeps or drops its loss scaler, and says so)\n"
    "  --no-augment          no random crops and flips\n"
    "  --precision f32|f16|bf16  default f32; f16/bf16 autocast forward and loss (f32 master\n"
    "                        weights), f16 with dynamic loss scaling\n"
    "  --graph               replay each step from a CUDA graph captured in an epoch's second\n"
    "                        step (one launch a step instead of hundreds)\n"
    "  --checkpoint none|blocks|first:K|N   activation checkpointing: none (default), every\n"
    "                        block, the first K blocks, or N segments of the feature layers\n"
    "                        (nn/checkpoint.h)\n"
    "  --recompute-depthwise recompute each inverted-residual block's depthwise output in\n"
    "                        backward instead of keeping it (less than one tensor per layer)\n"
    "  --memory-budget SIZE  fit the step into SIZE (e.g. 3GiB): the plain step, else the fewest\n"
    "                        checkpointed blocks, else micro-batches with gradient accumulation,\n"
    "                        chosen by the predicted peak; a CUDA allocator is capped at SIZE\n"
    "  --micro-batches N     accumulate gradients over N slices of each batch (one optimizer\n"
    "                        step; BatchNorm normalises each slice alone)\n"
    "  --planner on|off      plan each step's memory before the first step and replay it from\n"
    "                        one arena (on, the default, on CUDA; train/step_planner.h)\n"
    "  --memory-log PATH     record allocated, reserved and the device's used memory at every\n"
    "                        point of every step: CSV, or JSON when PATH ends in .json; warns\n"
    "                        when allocated memory keeps growing and names what grew\n"
    "  --memory-svg PATH     draw memory at each step's end over the run (PATH) and over the\n"
    "                        run's fourth step with its phases (PATH with -step before .svg)\n"
    "  --memory-trace PATH   every allocation, release, segment and OOM of the device with its\n"
    "                        tag (module path, op), as Chrome trace-event JSON for Perfetto\n"
    "                        (ui.perfetto.dev) or chrome://tracing\n"
    "  --release off|epoch|threshold[:F]|adaptive   give cached memory back at safe points: at\n"
    "                        epoch ends, when reserved passes F (0.85) of the cap or device, or\n"
    "                        down to what recent steps needed (train/release_scheduler.h)\n"
    "  --gpus N              data-parallel on N GPUs of this machine: starts N ranks (as\n"
    "                        frugal launch does), --batch images each, gradients averaged over\n"
    "                        NCCL; under a launcher (frugal launch, torchrun, mpirun, srun) every\n"
    "                        frugal train is one rank of the job without this flag\n"
    "  --sync-bn             BatchNorm statistics over every rank's batch (SyncBatchNorm)\n"
    "  --reduce-precision f32|f16|bf16   the dtype gradients are averaged in across ranks\n"
    "                        (default f32; f16/bf16 halve the traffic)\n"
    "  --loss-log PATH       every step's loss (mean over the ranks) as CSV: step,loss, written\n"
    "                        at each epoch's end; --resume keeps its rows up to the checkpoint\n"
    "  --oom-recover         retry a step that runs out of memory as micro-batches with gradient\n"
    "                        accumulation, then with every block checkpointed (weights and\n"
    "                        optimizer state untouched); the choice sticks for later steps\n";

// Note [Data parallelism]: rank 0 alone prints; the other ranks' stdout stays quiet (their
// errors still reach stderr, named by the launcher).
bool g_quiet = false;
[[gnu::format(printf, 1, 2)]] void say(const char* format, ...) {
  if (g_quiet) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The --memory-svg run picture's companion: the fourth step with its phases.
std::string step_svg_path(const std::string& path) {
  return (ends_with(path, ".svg") ? path.substr(0, path.size() - 4) : path) + "-step.svg";
}

// --memory-log (CSV, or JSON for .json) and --memory-svg (the run, and "-step" for one step).
void write_memory_files(const train::MemoryMonitor& monitor, const TrainOptions& o) {
  if (!o.memory_log.empty()) {
    if (ends_with(o.memory_log, ".json")) {
      monitor.write_json(o.memory_log);
    } else {
      monitor.write_csv(o.memory_log);
    }
    say("memory log: %s (%zu samples)\n", o.memory_log.c_str(), monitor.samples().size());
  }
  if (!o.memory_svg.empty()) {
    monitor.write_run_svg(o.memory_svg);
    monitor.write_step_svg(step_svg_path(o.memory_svg));
    say("memory pictures: %s, %s\n", o.memory_svg.c_str(), step_svg_path(o.memory_svg).c_str());
  }
  if (monitor.growth()) say("memory monitor: %s\n", monitor.growth()->str().c_str());
}

// The memory files of the run: --memory-log and --memory-svg (the monitor's, when there is one)
// and --memory-trace (when there is one, which stops recording).
void write_diagnostic_files(const train::MemoryMonitor* monitor, memory::AllocationTrace* trace,
                            const TrainOptions& o) {
  if (monitor != nullptr) write_memory_files(*monitor, o);
  if (trace != nullptr) {
    trace->stop();
    trace->write_json(o.memory_trace);
    say("memory trace: %s (%zu events, %zu dropped over the cap)\n", o.memory_trace.c_str(),
        trace->recorded(), trace->dropped());
  }
}

// Runs `write` when the scope is left by an exception: a run that ends in an error (out of
// memory above all) still leaves its memory files, which are what explains it. A failure to write
// them then is reported, not thrown over the first error.
class WriteOnError {
 public:
  explicit WriteOnError(std::function<void()> write)
      : write_(std::move(write)), exceptions_(std::uncaught_exceptions()) {}
  ~WriteOnError() {
    if (std::uncaught_exceptions() <= exceptions_) return;
    try {
      write_();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "frugal train: the memory files could not be written: %s\n", e.what());
    }
  }
  WriteOnError(const WriteOnError&) = delete;
  WriteOnError& operator=(const WriteOnError&) = delete;

 private:
  std::function<void()> write_;
  int exceptions_;
};

// Every file the run reads whole or writes is checked before training, so none fails after it.
void check_files(const TrainOptions& o) {
  if (!o.resume.empty()) check_input_file("train", "resume", o.resume);
  if (!o.save.empty()) check_save_path("train", "save", o.save);
  if (!o.memory_log.empty()) check_output_path("train", "memory-log", o.memory_log);
  if (!o.memory_svg.empty()) {
    check_output_path("train", "memory-svg", o.memory_svg);
    check_output_path("train", "memory-svg", step_svg_path(o.memory_svg));
  }
  if (!o.memory_trace.empty()) check_output_path("train", "memory-trace", o.memory_trace);
  if (!o.loss_log.empty()) check_output_path("train", "loss-log", o.loss_log);
}

// A checkpoint's position must be one this run can continue from: a negative or absurd epoch or
// step (a corrupt or hand-edited file) is refused naming the file, rather than trusted.
void check_resumed_state(const std::string& path, const train::TrainingState& st) {
  FRUGAL_CHECK(st.epoch >= 0 && st.epoch <= kMaxEpochs, "train: --resume '", path,
               "': the checkpoint's epoch ", st.epoch, " is outside [0, ", kMaxEpochs, "]");
  // 2^53 steps is far past any run and leaves the schedule's step counter room to grow.
  constexpr int64_t kMaxStep = int64_t{1} << 53;
  FRUGAL_CHECK(st.step >= 0 && st.step <= kMaxStep, "train: --resume '", path,
               "': the checkpoint's step ", st.step, " is outside [0, 2^53]");
}

// A step trains on slices of batch / micro_batches rows (all of --batch without micro-batches).
// One the model cannot train on fails here, naming the flags, not at the first step with
// BatchNorm's message alone: training BatchNorm needs more than one value a channel, and a slice
// of one row at a 1x1 feature map (MobileNetV2 at 32x32) has one. The model's forward runs on
// the meta device, where it costs no memory and moves no random stream.
void check_slices_train(const std::string& model_name, const models::ModelConfig& mc,
                        const train::DataConfig& dc, int64_t batch, int64_t micro_batches) {
  const int64_t rows = batch / micro_batches;
  GeneratorStateGuard keep_stream;
  nn::ConstructionDeviceGuard on_meta(Device::meta());
  std::shared_ptr<nn::Module> model = models::create(model_name, mc);
  model->train();
  autograd::NoGradGuard no_graph;
  try {
    (*model)(Tensor::empty({rows, dc.image_size, dc.image_size, mc.in_channels},
                           {.dtype = DType::f32, .device = Device::meta()}));
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(detail::str(
        "train: --batch ", batch,
        micro_batches > 1 ? detail::str(" as --micro-batches ", micro_batches) : std::string(),
        " trains on slices of ", rows, " row", rows == 1 ? "" : "s", ", which ", model_name,
        " at --image-size ", dc.image_size, " cannot train on (", e.what(),
        "); give a larger --batch", micro_batches > 1 ? " or fewer --micro-batches" : ""));
  }
}

// The optimizer's hyper-parameters as the checkpoint saved them must be this run's flags:
// load_state_dict takes the saved ones, as PyTorch's does, so a flag that differs would be
// ignored without a word (--lr too: the saved state holds the run's first rate once a schedule
// ran, else the rate itself). State saved before the hyper-parameters were leaves this run's in
// place, which then match.
void check_resumed_optimizer(const std::string& path, const optim::Optimizer& opt,
                             const TrainOptions& o) {
  auto same = [&](const char* flag, double saved, double given) {
    if (saved == given) return;
    throw UsageError(detail::str("train: --resume '", path, "' was saved by a run with --", flag,
                                 " ", saved, ", and this run has --", flag, " ", given,
                                 "; resume with --", flag, " ", saved));
  };
  same("lr", opt.initial_lr().value_or(opt.lr()), o.lr);
  if (const auto* sgd = dynamic_cast<const optim::SGD*>(&opt)) {
    same("momentum", sgd->options().momentum, o.momentum);
    same("weight-decay", sgd->options().weight_decay, o.weight_decay);
  } else if (const auto* adamw = dynamic_cast<const optim::AdamW*>(&opt)) {
    same("weight-decay", adamw->options().weight_decay, o.weight_decay);
  }
}

}  // namespace

int cmd_train(const std::vector<std::string>& argv) {
  const TrainOptions o = parse_train_options(argv);
  if (o.help) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const dist::DistEnv env = dist::dist_env();
  if (o.gpus > 0) {
    // --gpus N: this process becomes the launcher of N ranks (Note [Launching ranks]).
    if (env.distributed()) {
      throw UsageError("train: --gpus starts ranks itself; under a launcher (" + env.source +
                       ") leave it out");
    }
    const int count = kernels::cuda_device_count();
    if (count < o.gpus) {
      throw UsageError("train: --gpus " + std::to_string(o.gpus) + " needs as many GPUs; " +
                       (count == 0 ? std::string("no CUDA device is present")
                                   : "this machine has " + std::to_string(count)));
    }
    dist::LaunchOptions launch;
    launch.nproc = static_cast<int>(o.gpus);
    launch.command = {dist::current_executable()};
    for (std::string& a : rank_args_for_gpus(argv)) launch.command.push_back(std::move(a));
    return dist::launch(launch).exit_code;
  }
  if (o.deterministic) set_deterministic(true);
  const std::string& model_name = o.model;
  const int64_t epochs = o.epochs, batch = o.batch;
  const bool graph = o.graph;
  const std::string& opt_name = o.optimizer;
  const uint64_t seed = o.seed;
  const DType precision = o.precision;
  // Note [Data parallelism]: under a launcher (frugal launch, torchrun, mpirun, srun) this
  // process is one rank; on GPUs each rank trains on its local rank's device.
  Device device = resolve_device("train", o.device);
  if (env.distributed() && device.is_cuda())
    device = Device::cuda(static_cast<int>(env.local_rank));
  g_quiet = !env.is_main();
  if (env.distributed() && graph) {
    throw UsageError("train: --graph does not run under several processes yet; leave it out");
  }
  if (graph && !device.is_cuda()) {
    throw UsageError(
        detail::str("train: --graph replays the step from a CUDA graph; the device is ", device,
                    ". Leave it out, or train on a GPU"));
  }
  if (!env.distributed() && (o.sync_bn || o.reduce_precision != DType::f32)) {
    throw UsageError(
        "train: --sync-bn and --reduce-precision act across data-parallel ranks, and this run "
        "is one process; start ranks with --gpus N or frugal launch --nproc N, or leave them out");
  }
  if (env.distributed() && o.oom_recover) {
    // A rank retrying a step alone would leave the others' collectives unmatched.
    throw UsageError(
        "train: --oom-recover does not run under several processes; fit the step "
        "with --memory-budget (every rank then makes the same choice)");
  }
  std::shared_ptr<dist::ProcessGroup> group;
  if (env.distributed()) group = dist::init_process_group(env, device);
  check_files(o);

  const train::DataConfig& dc = o.data;
  train::DataSplits splits = train::make_data(dc);

  manual_seed(seed);
  models::ModelConfig mc = o.model_config;
  mc.num_classes = splits.num_classes;
  mc.in_channels = splits.train->sample_shape()[2];
  // A data-parallel step is dry-run wrapped the same way, over a group that moves nothing: for
  // the budget's prediction and the planner's plan.
  train::ModelWrapper wrap_like_run;
  if (group) {
    wrap_like_run = [&](std::shared_ptr<nn::Module> m) -> std::shared_ptr<nn::Module> {
      auto meta_group = std::make_shared<dist::MetaGroup>(group->size(), group->rank());
      if (o.sync_bn) dist::convert_sync_batchnorm(*m, meta_group);
      return std::make_shared<dist::DataParallel>(
          m, meta_group, dist::DataParallelOptions{.reduce_dtype = o.reduce_precision});
    };
  }
  // The training loader's options (its staged batch counts against a budget).
  const data::LoaderOptions train_loader_options{.batch_size = batch,
                                                 .shuffle = true,
                                                 .drop_last = true,
                                                 .num_workers = o.workers,
                                                 .prefetch = 4,
                                                 .seed = seed,
                                                 .rank = env.rank,
                                                 .world_size = env.world_size,
                                                 .transforms = splits.train_transforms,
                                                 .device = device};
  // The user's slices first, budget or not (a budget's own choices are runs that can train).
  // SyncBN normalizes over every rank's rows: one row a rank trains there.
  if (!(o.sync_bn && group)) check_slices_train(model_name, mc, dc, batch, o.micro_batches);
  // Note [Fitting a memory budget]: the cheapest way to fit, chosen by prediction before the
  // model is built; the allocator is capped at the budget, so a run never exceeds it.
  int64_t micro_batches = o.micro_batches;
  if (o.memory_budget) {
    const int64_t budget = *o.memory_budget;
    const Shape sample{dc.image_size, dc.image_size, dc.channels};
    const train::BudgetChoice choice = train::choose_for_budget(
        model_name, mc, Shape{batch, dc.image_size, dc.image_size, dc.channels}, precision,
        opt_name, budget, /*for_cuda=*/device.is_cuda(),
        {.resident_bytes = data::staged_device_bytes(train_loader_options, sample),
         .wrap = wrap_like_run});
    say("memory budget %.1f MiB: %s\n", static_cast<double>(budget) / 1048576.0,
        choice.str().c_str());
    if (!choice.fits) {
      throw UsageError("train: nothing fits --memory-budget of " + std::to_string(budget) +
                       " bytes at batch " + std::to_string(batch) + "; try a smaller batch");
    }
    mc.checkpoint = choice.checkpoint;
    micro_batches = choice.micro_batches;
    // The device's allocator only: on the CPU the loader's batches and the data set share the
    // host allocator, and the budget is about the step.
    if (device.is_cuda()) {
      memory::allocator_for(device).set_memory_cap_bytes(static_cast<size_t>(budget));
    }
  }
  auto model = models::create(model_name, mc);
  model->to(device);

  std::unique_ptr<optim::Optimizer> opt;
  if (opt_name == "sgd") {
    opt = std::make_unique<optim::SGD>(
        model->parameters(),
        optim::SgdOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  } else {
    opt = std::make_unique<optim::AdamW>(
        model->parameters(), optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  }

  const int workers = o.workers;
  // --batch is each rank's; every rank visits its shard of each epoch (and of the test set).
  data::DataLoader train_loader(splits.train, train_loader_options);
  // Evaluation reads batches as large as the step's slices: at the whole --batch, two layers'
  // activations of every row (in f32) can outgrow what a step of small slices keeps, and the
  // evaluation, not the step that --micro-batches or --memory-budget shaped, would set the run's
  // peak (about 55 MiB for the run, 16.5 MiB with these batches, at --batch 256 in 8 slices,
  // 32x32, width 0.25, on the CPU).
  // At least 32 rows (or the batch): one image at a time (--micro-batches equal to --batch)
  // would make evaluation crawl, for little memory.
  const int64_t eval_batch =
      std::max((batch + micro_batches - 1) / micro_batches, std::min<int64_t>(batch, 32));
  data::DataLoader test_loader(splits.test, {.batch_size = eval_batch,
                                             .shuffle = false,
                                             .num_workers = workers,
                                             .prefetch = 4,
                                             .seed = seed,
                                             .rank = env.rank,
                                             .world_size = env.world_size,
                                             .transforms = splits.test_transforms,
                                             .device = device});
  const int64_t steps_per_epoch = train_loader.batches_per_epoch();
  if (splits.train->size() == 0) {
    throw UsageError("train: the training set of --data " + dc.name + " has no samples");
  }
  if (steps_per_epoch == 0) {
    // Under data parallelism --batch is per rank, and so is the shard it must fit in.
    const int64_t n = splits.train->size();
    throw UsageError("train: --batch " + std::to_string(batch) + " is larger than the " +
                     (env.world_size > 1 ? std::to_string(data::shard_size(n, env.world_size)) +
                                               " training samples of each of the " +
                                               std::to_string(env.world_size) + " ranks (" +
                                               std::to_string(n) + " in all)"
                                         : std::to_string(n) + " training samples"));
  }

  std::unique_ptr<optim::LrSchedule> sched;
  if (o.schedule == "cosine") {
    auto warm = static_cast<int64_t>(o.warmup_epochs * static_cast<double>(steps_per_epoch));
    sched = std::make_unique<optim::CosineWarmup>(
        *opt,
        optim::CosineWarmupOptions{.warmup_steps = warm, .total_steps = epochs * steps_per_epoch});
  } else if (o.schedule == "step") {
    sched = std::make_unique<optim::StepLR>(
        *opt, std::max<int64_t>(epochs * steps_per_epoch / 3, 1), 0.1);
  }

  // f16 needs loss scaling; one scaler for the whole run (saved in checkpoints) so its scale
  // carries over epochs and resumes.
  std::unique_ptr<optim::GradScaler> scaler = optim::scaler_for(precision);

  int64_t first_epoch = 0;
  int64_t resumed_step = 0;  // optimizer steps the checkpoint had taken: the run counts on
  if (!o.resume.empty()) {
    train::TrainingState st = train::load_checkpoint(o.resume, *model, opt.get(), scaler.get());
    check_resumed_state(o.resume, st);
    check_resumed_optimizer(o.resume, *opt, o);
    // The seed drew the data order, the augmentations and the random stream the offset below
    // continues; another seed would resume some other run without a word.
    if (st.seed != seed) {
      throw UsageError("train: --resume '" + o.resume + "' was saved by a run with --seed " +
                       std::to_string(st.seed) + ", and this run has --seed " +
                       std::to_string(seed) + (o.seed_given ? "" : " (the default)") +
                       "; resume with --seed " + std::to_string(st.seed));
    }
    // Another --precision may resume a run (f16 that overflowed too often, on in bf16); the
    // loss scaler's state then goes or starts afresh, and the run says which.
    if (st.scaler_saved && !scaler) {
      say("resume: the checkpoint's loss scaler is left unused: this run trains in %s, which "
          "scales no loss\n",
          dtype_name(precision));
    } else if (!st.scaler_saved && scaler) {
      say("resume: the checkpoint holds no loss scaler (its run trained in f32 or bf16); loss "
          "scaling starts afresh at %g\n",
          scaler->get_scale());
    }
    first_epoch = st.epoch;
    resumed_step = st.step;
    default_generator().set_offset(st.rng_offset);
    if (sched) sched->jump_to(st.step);  // O(1): a step count of 9e18 must not loop
    say("resumed from %s at epoch %lld (step %lld)\n", o.resume.c_str(),
        static_cast<long long>(st.epoch), static_cast<long long>(st.step));
  }

  // Note [Data parallelism]: the replicas start from rank 0's weights and average their
  // gradients in backward; with loss scaling every rank skips the same steps.
  std::shared_ptr<nn::Module> trained = model;
  if (o.sync_bn && group) {
    say("sync-bn: %lld BatchNorm layers use every rank's batch statistics\n",
        static_cast<long long>(dist::convert_sync_batchnorm(*model, group)));
  }
  if (group) {
    trained = std::make_shared<dist::DataParallel>(
        model, group, dist::DataParallelOptions{.reduce_dtype = o.reduce_precision});
    if (scaler) dist::agree_on_overflow(*scaler, group);
  }

  // Note [Planned steps]: the step's memory planned before the first step, from a dry run on meta.
  const bool planned = o.planner;  // with --graph, the capture goes into its arena
  train::StepPlanner planner(planned ? device : Device::cpu());
  // The loader's batches after the transforms: resized to --image-size, --channels repeated.
  train::plan_before_first_step(planner, model_name, mc,
                                Shape{batch, dc.image_size, dc.image_size, dc.channels}, precision,
                                micro_batches, wrap_like_run);

  // The memory tools (issue: memory monitor, release scheduler, OOM recovery), on callbacks.
  train::StepCallbacks callbacks;
  // Allocator stats for `frugal smi`, at most every half second (memory/published_stats.h).
  callbacks.add(train::StepPoint::step_end, [device](const train::StepInfo& info) {
    memory::publish_stats(device, info.global_step + 1);
  });
  memory::Nvml nvml;  // opened on first use: only the monitor asks it, on CUDA
  std::unique_ptr<train::MemoryMonitor> monitor;
  if (!o.memory_log.empty() || !o.memory_svg.empty()) {
    train::MemoryMonitorOptions mo;
    if (device.is_cuda()) {
      if (nvml.available()) {
        mo.device_used = [&nvml, index = device.index]() -> int64_t {
          std::optional<memory::GpuDeviceInfo> d = nvml.device(index);
          return d ? d->used_bytes : -1;
        };
      } else {
        say("memory monitor: no NVML (%s); the device's used memory is not recorded\n",
            nvml.why_not().c_str());
      }
    }
    monitor = std::make_unique<train::MemoryMonitor>(device, mo);
    monitor->attach(callbacks);
  }
  // --loss-log: each step's loss read back (a synchronisation a step), averaged over the ranks
  // (their shards are the same size, so that is the global batch's mean loss).
  std::unique_ptr<LossLog> loss_log;
  if (!o.loss_log.empty()) {
    loss_log =
        std::make_unique<LossLog>(o.loss_log, !o.resume.empty() && env.is_main(), resumed_step);
    // Steps numbered as the run's optimizer steps: a resumed run's go on from the checkpoint's.
    callbacks.add(train::StepPoint::step_end,
                  [&loss_log, &group, resumed_step](const train::StepInfo& info) {
                    double loss = info.loss.item();
                    if (group)
                      loss = dist::all_reduce_values(*group, {loss}, dist::ReduceOp::avg)[0];
                    loss_log->add(resumed_step + info.global_step + 1, loss);
                  });
  }
  const train::ReleasePolicy& release_policy = o.release;
  train::ReleaseScheduler release(memory::allocator_for(device), release_policy);
  release.attach(callbacks);
  std::unique_ptr<memory::AllocationTrace> trace;
  if (!o.memory_trace.empty()) {
    trace = std::make_unique<memory::AllocationTrace>(
        device, memory::AllocationTrace::kDefaultMaxEvents, &memory::allocator_for(device));
  }
  const WriteOnError diagnostics_on_error([&monitor, &trace, &o, &env] {
    if (env.is_main()) write_diagnostic_files(monitor.get(), trace.get(), o);
  });
  std::unique_ptr<train::OomRecovery> recovery;
  std::unique_ptr<memory::LiveTags> live_tags;  // for the OOM report's largest allocations
  if (o.oom_recover) {
    // The last rung: checkpoint every block of the model as it stands (its state carries over).
    train::OomRecoveryOptions ro;
    ro.enable_checkpointing = [&model] { return models::checkpoint_blocks_in_place(*model) > 0; };
    recovery = std::make_unique<train::OomRecovery>(ro, micro_batches);
    if (!monitor) live_tags = std::make_unique<memory::LiveTags>(device);
  }

  say("training %s (%.2fM parameters, width %.2f) on %s: %lld samples, batch %lld%s, %s, "
      "device %s, %s\n",
      model_name.c_str(), static_cast<double>(model->num_parameters()) / 1e6, mc.width,
      dc.name.c_str(), static_cast<long long>(splits.train->size()), static_cast<long long>(batch),
      env.distributed()
          ? (" per rank on " + std::to_string(env.world_size) + " ranks (" + group->backend() + ")")
                .c_str()
          : "",
      opt->name().c_str(), device.str().c_str(), dtype_name(precision));
  std::fflush(stdout);
  const train::ProgressFn quiet_progress = [](const train::Progress&) {};
  double accuracy = 0;
  for (int64_t epoch = first_epoch; epoch < epochs; ++epoch) {
    train::EpochStats s = train::train_epoch(*trained, *opt, sched.get(), train_loader, epoch,
                                             {.label_smoothing = o.label_smoothing,
                                              .epochs = epochs,
                                              .progress = g_quiet ? quiet_progress : nullptr,
                                              .precision = precision,
                                              .scaler = scaler.get(),
                                              .graph = graph,
                                              .planner = &planner,
                                              .micro_batches = micro_batches,
                                              .callbacks = &callbacks,
                                              .oom_recovery = recovery.get()});
    // The epoch's training is kept before evaluation runs (which draws no random numbers, so
    // the saved offset is the next epoch's): an evaluation that fails, out of memory beside a
    // planned step's arena say, loses no training. The log first: a run that dies between the
    // two leaves a log that reaches past the checkpoint, which a resume cuts back, not one that
    // stops short of it.
    if (loss_log && env.is_main()) loss_log->flush();
    if (!o.save.empty() && env.is_main()) {  // the replicas are identical: one file
      // The optimizer steps taken, which the schedule follows: epochs times this run's steps an
      // epoch would miscount a run resumed with another --batch or --limit.
      train::TrainingState st{.epoch = epoch + 1,
                              .step = resumed_step + callbacks.steps_finished(),
                              .seed = seed,
                              .rng_offset = default_generator().offset(),
                              .extra = TrainedWith{.model = model_name,
                                                   .width = mc.width,
                                                   .image_size = dc.image_size,
                                                   .data = dc.name}
                                           .metadata()};
      train::save_checkpoint(o.save, *model, opt.get(), st, scaler.get());
    }
    accuracy = train::evaluate(*trained, test_loader, group.get());
    if (group) s = train::reduce_across(s, *group);
    say("epoch %lld/%lld: train loss %.4f, test accuracy %.2f%%, %.1f s (%.0f img/s), "
        "peak allocated %.1f MiB, peak reserved %.1f MiB\n",
        static_cast<long long>(epoch + 1), static_cast<long long>(epochs), s.loss, 100.0 * accuracy,
        s.seconds, s.images_per_second, static_cast<double>(s.peak_allocated) / 1048576.0,
        static_cast<double>(s.peak_reserved) / 1048576.0);
    std::fflush(stdout);
  }
  if (first_epoch >= epochs) {
    // A finished run resumed: nothing to train, but the accuracy printed is the model's own.
    say("the checkpoint has finished %lld of %lld epochs: nothing to train\n",
        static_cast<long long>(first_epoch), static_cast<long long>(epochs));
    accuracy = train::evaluate(*trained, test_loader, group.get());
  }
  say("test accuracy: %.2f%%\n", 100.0 * accuracy);
  if (group) {
    const bool agree = static_cast<dist::DataParallel&>(*trained).replicas_agree();
    say("replicas on %lld ranks: %s\n", static_cast<long long>(env.world_size),
        agree ? "identical" : "DIFFERENT (a bug: please report it)");
  }
  if (planner.active()) say("%s\n", planner.report().str().c_str());
  if (recovery && recovery->recoveries() > 0) {
    say("out-of-memory recovery: %lld out-of-memory errors recovered from; now %lld "
        "micro-batches%s\n",
        static_cast<long long>(recovery->recoveries()),
        static_cast<long long>(recovery->micro_batches()),
        recovery->checkpointing() ? " with checkpointing" : "");
  }
  if (release_policy.kind != train::ReleasePolicy::Kind::off) {
    say("release %s: %zu releases, %.1f MiB given back\n", release_policy.str().c_str(),
        release.releases().size(), static_cast<double>(release.released_bytes()) / 1048576.0);
  }
  if (env.is_main()) write_diagnostic_files(monitor.get(), trace.get(), o);  // rank 0's device
  if (loss_log && env.is_main()) {
    loss_log->flush();  // a finished run resumed has trained no epoch
    say("loss log: %s (%zu steps)\n", o.loss_log.c_str(), loss_log->steps_this_run());
  }
  memory::publish_stats(device, callbacks.steps_finished(), /*force=*/true);
  say("memory on %s:\n%s\n", device.str().c_str(),
      memory::allocator_for(device).stats().summary().c_str());
  return 0;
}

}  // namespace frugal::tools
