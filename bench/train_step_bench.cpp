// Times one full training step of a zoo model (forward, cross-entropy, backward, SGD momentum 0.9)
// on a fixed random batch: CUDA events on the compute stream or a steady clock on the CPU, median
// of the timed steps, and the allocator's peaks over the timed steps. --precision f16 runs forward
// and loss under autocast with a GradScaler, bf16 under autocast alone (PyTorch's recipe).
// bench/torch_train_step.py is its PyTorch twin with the same --json fields.
//
//   train_step_bench --device cuda --batch 128 --input 3x224x224 --classes 1000 --precision f16
//   --json
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/factory.h"
#include "dist/data_parallel.h"
#include "dist/env.h"
#include "dist/init.h"
#include "dist/meta_group.h"
#include "kernels/context.h"
#include "kernels/host_profile.h"
#include "memory/allocator.h"
#include "memory/cuda_allocators.h"
#include "memory/events.h"
#include "models/registry.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/captured_step.h"
#include "train/memory_budget.h"
#include "train/step_planner.h"
#include "train/step_timer.h"
#include "train/trainer.h"

#ifdef FRUGAL_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#endif

namespace frugal::bench {
namespace {

constexpr const char* kUsage =
    "usage: train_step_bench [--device cpu|cuda] [--model mobilenet_v2] [--batch N]\n"
    "                        [--input CxHxW] [--classes K] [--precision f32|f16|bf16]\n"
    "                        [--warmup N] [--steps N] [--seed S] [--json] [--profile]\n"
    "                        [--graph] [--checkpoint none|blocks|first:K|N] [--memory-cap-mib M]\n"
    "                        [--planner on|off] [--recompute-depthwise] [--micro-batches N]\n"
    "                        [--memory-budget-mib M] [--segments]\n"
    "  --segments:       the caching allocator's segments after the timed steps, in the JSON\n"
    "  --checkpoint:     activation checkpointing (models::CheckpointPolicy)\n"
    "  --micro-batches:  accumulate gradients over N slices of the batch (train::train_step)\n"
    "  --memory-budget-mib: the cheapest way to fit M MiB (train::choose_for_budget: plain,\n"
    "      checkpointed leading blocks, micro-batches), as frugal train --memory-budget does,\n"
    "      with the allocator capped at M; overrides --checkpoint and --micro-batches\n"
    "  --planner on|off: plan the step's memory before the first step and replay it from one\n"
    "      arena (on by default; with --graph the capture goes into that arena)\n"
    "  --memory-cap-mib: cap the CUDA caching allocator's reserved memory (an OOM beyond it)\n"
    "  --graph:   capture the step as a CUDA graph in the last warm-up step and replay it\n"
    "             (train/captured_step.h); eager where graphs are not available\n"
    "  --profile: bracket the last timed step with cudaProfilerStart/Stop, for\n"
    "             ncu --profile-from-start off (scripts/gpu-profile.sh)\n";

void device_sync(Device device) {
#ifdef FRUGAL_WITH_CUDA
  if (device.is_cuda()) kernels::cuda::synchronize(device);
#else
  (void)device;
#endif
}

// Opens or closes the window an external profiler (ncu --profile-from-start off) records.
void set_profiler(bool on) {
#ifdef FRUGAL_WITH_CUDA
  if (on) {
    CUDA_CHECK(cudaProfilerStart());
  } else {
    CUDA_CHECK(cudaProfilerStop());
  }
#else
  (void)on;
#endif
}

std::string device_name(Device device) {
#ifdef FRUGAL_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device.index) == cudaSuccess) return prop.name;
    return "unknown CUDA device";
  }
#else
  (void)device;
#endif
  return cpu_name();
}

// Who mapped each segment (--segments): the tag of the request that made the caching allocator
// reserve more, in order, from before the model is built to the end of the timed steps.
class SegmentMaps final : public memory::AllocationObserver {
 public:
  explicit SegmentMaps(Device device) : device_(device) { memory::add_allocation_observer(this); }
  ~SegmentMaps() override { memory::remove_allocation_observer(this); }
  void on_event(const memory::AllocationEvent& e) override {
    if (e.device != device_ || e.kind != memory::EventKind::segment_map) return;
    std::lock_guard<std::mutex> lock(mu_);
    nlohmann::ordered_json m;
    m["bytes"] = e.bytes;
    m["tag"] = memory::tag_name(e);
    m["category"] = memory::category_name(e.tag->category);
    m["phase"] = memory::phase_name(e.tag->phase);
    m["step"] = step.load();
    maps_.push_back(std::move(m));
  }
  nlohmann::ordered_json json() {
    std::lock_guard<std::mutex> lock(mu_);
    return maps_;
  }
  std::atomic<int64_t> step{-1};  // -1 before the first step

 private:
  Device device_;
  std::mutex mu_;
  nlohmann::ordered_json maps_ = nlohmann::json::array();
};

// Where reserved memory goes between steps: each segment of the caching allocator with its pool,
// its allocated bytes and its free blocks (--segments), to tell fragmentation from live data.
nlohmann::ordered_json segments_json(Device device) {
  nlohmann::ordered_json out = nlohmann::json::array();
  for (const memory::SegmentSnapshot& s : memory::cuda_caching_allocator(device.index).snapshot()) {
    nlohmann::ordered_json seg;
    seg["size"] = s.size;
    seg["pool"] = s.arena ? "arena" : s.small_pool ? "small" : "large";
    size_t allocated = 0;
    nlohmann::ordered_json free_blocks = nlohmann::json::array();
    for (const memory::BlockSnapshot& b : s.blocks) {
      if (b.allocated)
        allocated += b.size;
      else
        free_blocks.push_back(b.size);
    }
    seg["allocated"] = allocated;
    seg["blocks"] = s.blocks.size();
    seg["free_blocks"] = free_blocks;
    out.push_back(seg);
  }
  return out;
}

int run(int argc, char** argv) {
  Flags flags(
      argc, argv,
      {"device", "model", "batch", "input", "classes", "precision", "warmup", "steps", "seed",
       "checkpoint", "memory-cap-mib", "planner", "micro-batches", "memory-budget-mib"},
      {"json", "help", "profile", "graph", "recompute-depthwise", "segments"});
  if (flags.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  // Under a launcher (frugal launch, torchrun) one rank of a data-parallel job: its own batch on
  // cuda:LOCAL_RANK, gradients averaged by DataParallel; rank 0 alone prints, and img/s counts
  // every rank's images (bench/torch_train_step.py under torchrun is the twin).
  const dist::DistEnv env = dist::dist_env();
  Device device = parse_device(flags.str("device", "cpu"));
  if (env.distributed() && device.is_cuda())
    device = Device::cuda(static_cast<int>(env.local_rank));
  const std::string model_name = flags.str("model", "mobilenet_v2");
  const int64_t batch = flags.integer("batch", 64, 1);
  const std::string input = flags.str("input", "1x32x32");
  const std::vector<int64_t> chw = parse_chw(input);
  const int64_t classes = flags.integer("classes", 10, 2);
  const int64_t warmup = flags.integer("warmup", 5, 1);
  const int64_t steps = flags.integer("steps", 20, 1);
  const uint64_t seed = static_cast<uint64_t>(flags.integer("seed", 0, 0));
  const std::string precision = flags.str("precision", "f32");
  if (precision != "f32" && precision != "f16" && precision != "bf16")
    throw std::invalid_argument("--precision expects f32, f16 or bf16, got '" + precision + "'");
  const DType amp_dtype = parse_dtype(precision);
  if (device.is_cuda() && kernels::cuda_device_count() <= device.index)
    throw std::invalid_argument("--device " + device.str() + ": no such CUDA device");
  if (device.is_meta()) throw std::invalid_argument("--device meta has no clock to time");

  const bool recompute_depthwise = flags.flag("recompute-depthwise");
  models::CheckpointPolicy checkpoint =
      models::CheckpointPolicy::parse(flags.str("checkpoint", "none"));
  int64_t micro_batches = flags.integer("micro-batches", 1, 1);
  int64_t cap_mib = flags.integer("memory-cap-mib", 0, 0);
  std::string budget_choice;
  if (const int64_t budget_mib = flags.integer("memory-budget-mib", 0, 0); budget_mib > 0) {
    // Note [Fitting a memory budget], as frugal train --memory-budget chooses.
    const train::BudgetChoice c = train::choose_for_budget(
        model_name, {.num_classes = classes, .in_channels = chw[0]},
        Shape{batch, chw[1], chw[2], chw[0]}, amp_dtype, "sgd", budget_mib << 20, device.is_cuda());
    if (!c.fits) throw std::invalid_argument("--memory-budget-mib: nothing fits, " + c.str());
    checkpoint = c.checkpoint;
    micro_batches = c.micro_batches;
    cap_mib = budget_mib;
    budget_choice = c.str();
  }
  if (cap_mib > 0) {
    if (!device.is_cuda()) throw std::invalid_argument("--memory-cap-mib needs a CUDA device");
    memory::cuda_caching_allocator(device.index)
        .set_memory_cap_bytes(static_cast<size_t>(cap_mib) << 20);
  }
  const models::ModelConfig config{.num_classes = classes,
                                   .in_channels = chw[0],
                                   .checkpoint = checkpoint,
                                   .recompute_depthwise = recompute_depthwise};
  std::unique_ptr<SegmentMaps> segment_maps;
  if (flags.flag("segments") && device.is_cuda())
    segment_maps = std::make_unique<SegmentMaps>(device);
  std::shared_ptr<nn::Module> model = models::create(model_name, config);
  model->to(device);
  model->train();
  std::shared_ptr<dist::ProcessGroup> group;
  if (env.distributed()) {
    group = dist::init_process_group(env, device);
    model = std::make_shared<dist::DataParallel>(model, group);
  }
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});

  // A fixed random batch on the device: images N(0, 1) in NHWC, labels uniform in [0, K); each
  // rank its own.
  const uint64_t rank_seed = seed + static_cast<uint64_t>(env.rank);
  Generator gen(rank_seed);
  std::mt19937_64 rng(rank_seed);
  std::uniform_int_distribution<int64_t> pick(0, classes - 1);
  std::vector<double> label_values(static_cast<size_t>(batch));
  for (auto& v : label_values) v = static_cast<double>(pick(rng));
  Tensor images, labels;
  {
    // A segment of its own size, as the DataLoader stages its batches (data/copy_stager.cpp).
    memory::ResidentBlockScope own_segment;
    images = randn({batch, chw[1], chw[2], chw[0]}, gen, {.device = device});  // [N, H, W, C]
    labels = from_vector(label_values, {batch}, {.dtype = DType::i64, .device = device});
  }

  // f16 needs loss scaling (PyTorch's GradScaler defaults); bf16 has f32's range and needs none.
  std::unique_ptr<optim::GradScaler> scaler = optim::scaler_for(amp_dtype);
  if (group && scaler) dist::agree_on_overflow(*scaler, group);

  // --planner on (the default; with --graph the capture goes into its arena): the step's memory is
  // planned before the first step (a dry run on meta) and replayed from one arena (Note [Planned
  // steps]).
  const std::string planner_flag = flags.str("planner", "on");
  if (planner_flag != "on" && planner_flag != "off")
    throw std::invalid_argument("--planner expects on or off, got '" + planner_flag + "'");
  train::StepPlanner planner(planner_flag == "on" ? device : Device::cpu());
  // A data-parallel step is dry-run wrapped the same way, over a group that moves nothing.
  train::ModelWrapper wrap_like_run;
  if (group) {
    wrap_like_run = [&](std::shared_ptr<nn::Module> m) -> std::shared_ptr<nn::Module> {
      return std::make_shared<dist::DataParallel>(
          m, std::make_shared<dist::MetaGroup>(group->size(), group->rank()));
    };
  }
  train::plan_before_first_step(planner, model_name, config, Shape{batch, chw[1], chw[2], chw[0]},
                                amp_dtype, micro_batches, wrap_like_run);  // nothing when off
  auto train_once = [&] {
    return train::train_step(*model, opt, images, labels, amp_dtype, scaler.get(), 0.0,
                             micro_batches);
  };
  auto eager_step = [&]() -> Tensor {
    Tensor out;
    planner.run([&] { out = train_once(); });
    return out;
  };
  // --graph: the warm-up runs eagerly but for its last step, which captures (and replays).
  const bool graph = flags.flag("graph");
  if (graph && warmup < 2) throw std::invalid_argument("--graph needs --warmup 2 or more");
  if (graph && group) throw std::invalid_argument("--graph does not run under several ranks yet");
  // Planned, the capture goes into the planner's arena (Note [Captured steps in the arena]).
  train::CapturedStep captured(device, train_once,
                               {.warmup = std::max<int64_t>(1, warmup - 1), .planner = &planner});
  int64_t steps_run = 0;
  auto step = [&]() -> Tensor {
    if (segment_maps) segment_maps->step = steps_run;
    steps_run++;
    return graph ? captured() : eager_step();
  };

  Tensor loss;
  // A planner still settling keeps the capture waiting (train::CapturedStep): warm up until the
  // step is captured, within the capture's own limit.
  int64_t warmup_done = 0;
  int64_t capture_peak_allocated = 0;  // of the captured step, which replays then reuse
  for (; warmup_done < warmup || (graph && !captured.captured() &&
                                  warmup_done < warmup + train::CapturedStep::kMaxSettlingCalls);
       ++warmup_done) {
    memory::Allocator& a = memory::allocator_for(device);
    const bool capturing_next = graph && !captured.captured();
    if (capturing_next) a.reset_peak_stats();
    loss = step();
    if (capturing_next && captured.captured())
      capture_peak_allocated = a.stats().allocated_bytes.peak;
  }
  const double warmup_loss = loss.item();  // synchronises
  device_sync(device);

  // Peaks over the timed steps, measured from the state after warm-up: parameters, gradients of
  // the last step, momentum buffers and the batch are live then, as in PyTorch after
  // reset_peak_memory_stats.
  memory::Allocator& alloc = memory::allocator_for(device);
  alloc.reset_peak_stats();
  kernels::host_profile::reset();  // FRUGAL_HOST_PROFILE=1 reports the timed steps only
  // ru_maxrss follows the reset below, so the whole-process peak is read before it.
  const int64_t max_rss_before = max_rss_bytes();
  const bool rss_reset = reset_peak_rss();
  const int64_t rss_before = proc_status_bytes("VmRSS");

  train::StepTimer timer(device, steps);
  auto wall0 = std::chrono::steady_clock::now();
  const bool profile = flags.flag("profile") && device.is_cuda();
  for (int64_t i = 0; i < steps; ++i) {
    if (profile && i == steps - 1) set_profiler(true);
    timer.begin(i);
    loss = step();
    timer.end(i);
  }
  if (profile) set_profiler(false);
  device_sync(device);
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  const double final_loss = loss.item();
  if (!std::isfinite(final_loss)) throw std::runtime_error("loss is not finite after the steps");

  const std::vector<double> ms = timer.milliseconds();
  const double med = median(ms);
  const memory::MemoryStats stats = alloc.stats();

  nlohmann::ordered_json j;
  j["impl"] = "frugal";
  j["model"] = model_name;
  j["device"] = device.is_cuda() ? "cuda" : "cpu";
  j["device_name"] = device_name(device);
  j["precision"] = precision;
  j["graph"] = graph && captured.captured();
  j["config"] = "checkpoint " + checkpoint.str() +
                (recompute_depthwise ? ", depthwise recomputed" : "") +
                (micro_batches > 1 ? ", " + std::to_string(micro_batches) + " micro-batches" : "") +
                (planner.active() ? ", planner" : "");
  if (!budget_choice.empty()) j["memory_budget_choice"] = budget_choice;
  j["layout"] = "NHWC";
  j["batch"] = batch;
  j["input"] = input;
  j["classes"] = classes;
  j["warmup"] = warmup_done;
  j["steps"] = steps;
  j["threads"] = device.is_cpu() ? omp_get_max_threads() : 0;
  j["timer"] = timer.clock_name();
  j["median_ms"] = med;
  j["min_ms"] = *std::min_element(ms.begin(), ms.end());
  j["max_ms"] = *std::max_element(ms.begin(), ms.end());
  j["mean_wall_ms"] = wall_ms / static_cast<double>(steps);
  j["world_size"] = env.world_size;
  j["img_per_s"] = med > 0 ? 1000.0 * static_cast<double>(batch * env.world_size) / med : 0.0;
  j["peak_allocated_bytes"] = stats.allocated_bytes.peak;
  if (j["graph"].get<bool>()) j["capture_peak_allocated_bytes"] = capture_peak_allocated;
  j["peak_reserved_bytes"] = stats.reserved_bytes.peak;
  j["memory_measured"] =
      std::string("peak of frugal's ") + (device.is_cuda() ? "CUDA caching" : "host") +
      " allocator over the timed steps, from the state after warm-up (parameters, gradients, "
      "momentum, batch included)" +
      std::string(j["graph"].get<bool>()
                      ? "; replays allocate nothing, so the captured step's temporaries show "
                        "in peak reserved only, and capture_peak_allocated_bytes is the peak "
                        "allocated while the step was captured"
                      : "");
  const int64_t peak_rss_timed = rss_reset ? proc_status_bytes("VmHWM") : -1;
  j["peak_rss_timed_bytes"] = peak_rss_timed;
  j["rss_before_timed_bytes"] = rss_before;
  j["max_rss_bytes"] = std::max({max_rss_before, peak_rss_timed, max_rss_bytes()});
  j["planner"] = planner.active();
  if (planner.active()) {
    const train::PlannerReport& r = planner.report();
    j["planner_arena_bytes"] = r.arena_bytes;
    j["planner_lower_bound_bytes"] = r.lower_bound;
    j["planner_replans"] = r.replans;
    j["planner_followed"] = r.last.followed();
    j["planner_report"] = r.str();
  }
  if (segment_maps) {
    j["segments"] = segments_json(device);
    j["segment_maps"] = segment_maps->json();
  }
  j["num_parameters"] = model->num_parameters();
  j["loss_after_warmup"] = warmup_loss;
  j["loss_final"] = final_loss;

  if (!env.is_main()) return 0;
  if (flags.flag("json")) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  std::printf(
      "frugal %s on %s (%s), batch %lld%s, input %s, %lld classes, %s%s\n", model_name.c_str(),
      device.str().c_str(), device_name(device).c_str(), static_cast<long long>(batch),
      env.distributed() ? (" per rank, " + std::to_string(env.world_size) + " ranks").c_str() : "",
      input.c_str(), static_cast<long long>(classes), precision.c_str(),
      j["graph"].get<bool>() ? ", replayed from a CUDA graph" : "");
  std::printf(
      "  %lld warm-up + %lld timed steps (%s): median %.2f ms, min %.2f, max %.2f, "
      "mean wall %.2f ms\n",
      static_cast<long long>(warmup), static_cast<long long>(steps),
      j["timer"].get<std::string>().c_str(), med, j["min_ms"].get<double>(),
      j["max_ms"].get<double>(), j["mean_wall_ms"].get<double>());
  std::printf("  %.1f img/s\n", j["img_per_s"].get<double>());
  std::printf("  peak allocated %.1f MiB, peak reserved %.1f MiB (%s)\n",
              static_cast<double>(stats.allocated_bytes.peak) / kMiB,
              static_cast<double>(stats.reserved_bytes.peak) / kMiB,
              j["memory_measured"].get<std::string>().c_str());
  std::printf("  process RSS: peak over timed steps %.1f MiB, max over the process %.1f MiB\n",
              static_cast<double>(j["peak_rss_timed_bytes"].get<int64_t>()) / kMiB,
              static_cast<double>(j["max_rss_bytes"].get<int64_t>()) / kMiB);
  std::printf("  loss after warm-up %.4f, after the timed steps %.4f\n", warmup_loss, final_loss);
  if (planner.active()) std::printf("  %s\n", planner.report().str().c_str());
  return 0;
}

}  // namespace
}  // namespace frugal::bench

int main(int argc, char** argv) {
  try {
    return frugal::bench::run(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "train_step_bench: %s\n%s", e.what(), frugal::bench::kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 1;
  }
}
