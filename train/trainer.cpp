// The epoch loop: the running loss sum stays on the device and is read back only at log points,
// so a CUDA step never waits for the host.
#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "dist/data_parallel.h"
#include "kernels/context.h"
#include "kernels/host_profile.h"
#include "nn/functional.h"
#include "train/captured_step.h"

namespace frugal::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Rows whose argmax equals the label. Evaluation reads the predictions back (8 bytes a
// sample), which is cheap next to the forward pass and keeps the op set small.
// Among the first `rows` rows.
int64_t correct_count(const Tensor& logits, const Tensor& labels, int64_t rows) {
  std::vector<double> p = argmax(logits.detach()).to_vector(), l = labels.to_vector();
  int64_t n = 0;
  for (size_t i = 0; i < p.size() && static_cast<int64_t>(i) < rows; ++i) n += p[i] == l[i];
  return n;
}

}  // namespace

void print_progress(const Progress& p) {
  constexpr int kWidth = 24;
  int filled = p.steps > 0 ? static_cast<int>(kWidth * p.step / p.steps) : 0;
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(kWidth, ' ');
  bool tty = isatty(fileno(stderr)) != 0;
  std::fprintf(stderr, "%sepoch %lld/%lld [%s] %lld/%lld loss %.4f | %.0f img/s | mem %.1f MiB%s",
               tty ? "\r" : "", static_cast<long long>(p.epoch + 1),
               static_cast<long long>(p.epochs), bar.c_str(), static_cast<long long>(p.step),
               static_cast<long long>(p.steps), p.loss, p.images_per_second,
               static_cast<double>(p.allocated) / (1024.0 * 1024.0),
               (tty && p.step < p.steps) ? "" : "\n");
  std::fflush(stderr);
}

namespace {

// Forward, loss and backward of rows [start, start + rows) of the batch, gradients accumulated
// into .grad; the loss is scaled by `weight` (their share of the batch) before backward. Returns
// the unweighted loss.
Tensor forward_backward(nn::Module& model, const Tensor& images, const Tensor& labels,
                        int64_t start, int64_t rows, DType precision, optim::GradScaler* scaler,
                        double label_smoothing, double weight, const StepCallbacks* callbacks,
                        int64_t micro_batch) {
  namespace hp = kernels::host_profile;  // phases of the step (FRUGAL_HOST_PROFILE=1)
  Tensor loss;
  {
    hp::Scope phase("phase forward+loss");
    memory::PhaseScope tag(memory::Phase::forward);  // Note [Allocation events]
    const bool whole = start == 0 && rows == images.size(0);
    Tensor x = whole ? images : slice_rows(images, start, rows);
    Tensor y = whole ? labels : slice_rows(labels, start, rows);
    // Autocast covers forward and loss only; backward runs each op in its forward's dtype.
    std::optional<AutocastGuard> amp;  // f32 leaves any caller's autocast state alone
    if (is_low_precision(precision)) amp.emplace(images.device(), precision);
    Tensor logits = model(x);  // [N, classes]
    loss = nn::functional::cross_entropy(logits, y, {.label_smoothing = label_smoothing});
  }
  if (callbacks != nullptr) callbacks->fire(StepPoint::after_forward, loss, micro_batch);
  {
    hp::Scope phase("phase backward");
    memory::PhaseScope tag(memory::Phase::backward);
    Tensor objective = weight == 1.0 ? loss : mul(loss, weight);
    (scaler != nullptr ? scaler->scale(objective) : objective).backward();
  }
  if (callbacks != nullptr) callbacks->fire(StepPoint::after_backward, loss, micro_batch);
  return loss;
}

// after_optimizer runs once the step is taken: an out-of-memory error there must not reach
// OomRecovery, which would take the step again (Note [Recovering from out of memory]).
void fire_after_optimizer(const StepCallbacks* callbacks, const Tensor& loss) {
  if (callbacks == nullptr) return;
  try {
    callbacks->fire(StepPoint::after_optimizer, loss);
  } catch (const OutOfMemoryError& e) {
    FRUGAL_FAIL("train_step: a callback at after_optimizer ran out of memory after the optimizer ",
                "step was taken, which cannot be undone: ", e.what());
  }
}

void optimizer_step(optim::Optimizer& opt, optim::GradScaler* scaler) {
  namespace hp = kernels::host_profile;
  hp::Scope phase("phase optimizer");
  memory::PhaseScope tag(memory::Phase::optimizer);
  if (scaler != nullptr) {
    scaler->step(opt);  // skipped on the device when a gradient overflowed
    scaler->update();
  } else {
    opt.step();
  }
}

}  // namespace

Tensor train_step(nn::Module& model, optim::Optimizer& opt, const Tensor& images,
                  const Tensor& labels, DType precision, optim::GradScaler* scaler,
                  double label_smoothing, int64_t micro_batches, const StepCallbacks* callbacks) {
  const int64_t n = images.size(0);
  FRUGAL_CHECK(micro_batches >= 1 && micro_batches <= n,
               "train_step: micro_batches must be in [1, ", n, "] for a batch of ", n, ", got ",
               micro_batches);
  opt.zero_grad();
  if (micro_batches == 1) {
    Tensor loss = forward_backward(model, images, labels, 0, n, precision, scaler, label_smoothing,
                                   1.0, callbacks, 0);
    optimizer_step(opt, scaler);
    fire_after_optimizer(callbacks, loss);
    return loss;
  }
  // Note [Micro-batches]: slices of n / m rows (the first n % m one more), each loss weighted by
  // its share, so the accumulated gradient is the batch's mean loss gradient, but for BatchNorm,
  // which normalises each slice with its own statistics (as PyTorch's accumulation does).
  auto* ddp = dynamic_cast<dist::DataParallel*>(&model);
  Tensor total;
  int64_t start = 0;
  for (int64_t i = 0; i < micro_batches; ++i) {
    const int64_t rows = n / micro_batches + (i < n % micro_batches ? 1 : 0);
    const double weight = static_cast<double>(rows) / static_cast<double>(n);
    // Data parallelism: gradients stay local until the last micro-batch's backward averages
    // them all (Note [Data parallelism]), one all-reduce a step.
    std::optional<dist::DataParallel::NoSync> local;
    if (ddp != nullptr && i + 1 < micro_batches) local.emplace(*ddp);
    Tensor loss = forward_backward(model, images, labels, start, rows, precision, scaler,
                                   label_smoothing, weight, callbacks, i);
    local.reset();
    autograd::NoGradGuard ng;
    Tensor part = mul(loss.detach(), weight);
    total = total.defined() ? add(total, part) : part;
    start += rows;
  }
  optimizer_step(opt, scaler);
  fire_after_optimizer(callbacks, total);
  return total;
}

EpochStats train_epoch(nn::Module& model, optim::Optimizer& opt, optim::LrSchedule* schedule,
                       data::DataLoader& loader, int64_t epoch, const EpochOptions& options) {
  const DType precision = options.precision;
  // Refused before anything changes: the model's mode and the peak statistics stay as they were.
  FRUGAL_CHECK(precision == DType::f32 || is_low_precision(precision),
               "train_epoch: precision must be f32, f16 or bf16, got ", precision);
  FRUGAL_CHECK(options.log_every >= 1, "train_epoch: log_every must be >= 1, got ",
               options.log_every);
  FRUGAL_CHECK(options.micro_batches >= 1, "train_epoch: micro_batches must be >= 1, got ",
               options.micro_batches);
  FRUGAL_CHECK(precision != DType::f16 || options.scaler != nullptr,
               "train_epoch: f16 training needs a GradScaler (EpochOptions::scaler); its small ",
               "exponent range underflows unscaled gradients");
  model.train();
  Device device = opt.params().empty() ? Device::cpu() : opt.params()[0].device();
  memory::Allocator& alloc = memory::allocator_for(device);
  alloc.reset_peak_stats();
  ProgressFn progress = options.progress ? options.progress : print_progress;
  optim::GradScaler* scaler = options.scaler;
  // EpochOptions::graph: the captured step reads its batch from these fixed tensors, and its
  // learning rate from the device (Note [Learning rate on the device]), so schedules still work.
  if (options.graph) opt.keep_lr_on_device(device);
  Tensor graph_images, graph_labels;
  Shape planned_shape;  // of the epoch's first batch: the step the planner serves
  std::unique_ptr<CapturedStep> captured;
  // The captured step's callbacks: this epoch's for its eager calls (warm-up, CPU), none for the
  // capture and the replays, which run no host code inside the step (Note [Step points]).
  StepCallbacks* graph_callbacks = nullptr;

  EpochStats stats;
  const int64_t steps = loader.batches_per_epoch();
  Tensor loss_sum = zeros({}, {.device = device});  // device-side running sums
  int64_t step = 0, since_log = 0;
  auto t0 = Clock::now(), t_log = t0;
  StepCallbacks* callbacks = options.callbacks;
  loader.begin_epoch(epoch);
  while (auto batch = loader.next()) {
    Tensor loss;
    if (callbacks != nullptr) callbacks->set_position(epoch, step, device);
    if (options.graph && (captured == nullptr || batch->images.shape() == graph_images.shape())) {
      if (captured == nullptr) {
        graph_images = Tensor::empty(batch->images.shape(), batch->images.options());
        graph_labels = Tensor::empty(batch->labels.shape(), batch->labels.options());
        captured = std::make_unique<CapturedStep>(
            device,
            [&] {
              // The same micro-batches as the eager steps (Note [Micro-batches]): a budget that
              // chose them must hold for the replayed step too.
              return train_step(model, opt, graph_images, graph_labels, precision, scaler,
                                options.label_smoothing,
                                std::min(options.micro_batches, graph_images.size(0)),
                                graph_callbacks);
            },
            // Planned, the capture lives in the planner's arena (Note [Captured training steps]).
            CapturedStepOptions{.warmup = 1, .planner = options.planner});
        planned_shape = batch->images.shape();  // a last partial batch runs unplanned
      }
      copy_(graph_images, batch->images);
      copy_(graph_labels, batch->labels);
      graph_callbacks = captured->next_call_is_eager() ? callbacks : nullptr;
      if (graph_callbacks != nullptr) graph_callbacks->fire(StepPoint::step_begin);
      loss = (*captured)();
    } else {
      if (planned_shape.ndim() == 0) planned_shape = batch->images.shape();
      if (callbacks != nullptr) callbacks->fire(StepPoint::step_begin);
      const int64_t rows = batch->images.size(0);
      const bool plan_it = options.planner != nullptr && batch->images.shape() == planned_shape;
      // Each attempt is a step of its own to the planner: one out of memory drops its plan, and
      // the retry (outside any planned step, its state undone) is recorded and planned anew.
      auto step_of = [&](int64_t micro_batches) {
        auto once = [&] {
          return train_step(model, opt, batch->images, batch->labels, precision, scaler,
                            options.label_smoothing, std::min(micro_batches, rows), callbacks);
        };
        if (!plan_it) return once();
        Tensor out;
        options.planner->run([&] { out = once(); });
        return out;
      };
      loss = options.oom_recovery != nullptr
                 ? options.oom_recovery->run(model, opt, scaler, rows, step_of)
                 : step_of(options.micro_batches);
    }
    if (schedule != nullptr) schedule->step();
    if (callbacks != nullptr) callbacks->fire(StepPoint::step_end, loss);
    {
      autograd::NoGradGuard ng;
      loss_sum = add(loss_sum, mul(loss.detach(), static_cast<double>(batch->images.size(0))));
    }
    stats.samples += batch->images.size(0);
    since_log += batch->images.size(0);
    ++step;
    if (step % options.log_every == 0 || step == steps) {
      // The loss read waits for the device: the window's time then counts its steps' work, not
      // only the host's queueing of it (which runs ahead, far ahead with replayed steps).
      const double loss_now = loss.item();
      const double now = seconds_since(t_log);
      Progress p{epoch,
                 options.epochs,
                 step,
                 steps,
                 loss_now,
                 now > 0 ? static_cast<double>(since_log) / now : 0,
                 alloc.stats().allocated_bytes.current};
      progress(p);
      t_log = Clock::now();
      since_log = 0;
    }
  }
  if (callbacks != nullptr) callbacks->fire(StepPoint::epoch_end);
  stats.seconds = seconds_since(t0);
  stats.loss = stats.samples > 0 ? loss_sum.item() / static_cast<double>(stats.samples) : 0;
  stats.images_per_second =
      stats.seconds > 0 ? static_cast<double>(stats.samples) / stats.seconds : 0;
  memory::MemoryStats ms = alloc.stats();
  stats.peak_allocated = ms.allocated_bytes.peak;
  stats.peak_reserved = ms.reserved_bytes.peak;
  return stats;
}

EpochStats reduce_across(const EpochStats& local, dist::ProcessGroup& group) {
  const auto samples = static_cast<double>(local.samples);
  std::vector<double> sums =
      dist::all_reduce_values(group, {local.loss * samples, samples}, dist::ReduceOp::sum);
  std::vector<double> maxima =
      dist::all_reduce_values(group,
                              {local.seconds, static_cast<double>(local.peak_allocated),
                               static_cast<double>(local.peak_reserved)},
                              dist::ReduceOp::max);
  EpochStats out;
  out.samples = static_cast<int64_t>(sums[1]);
  out.loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
  out.seconds = maxima[0];
  out.images_per_second = out.seconds > 0 ? sums[1] / out.seconds : 0;
  out.peak_allocated = static_cast<int64_t>(maxima[1]);
  out.peak_reserved = static_cast<int64_t>(maxima[2]);
  return out;
}

double evaluate(nn::Module& model, data::DataLoader& loader, dist::ProcessGroup* group) {
  // The model's mode comes back however evaluation ends: a caller that catches an error (out of
  // memory, a loader's) and goes on training must not train with running statistics.
  struct RestoreMode {
    nn::Module& model;
    bool was_training;
    ~RestoreMode() { model.train(was_training); }
  } restore{model, model.is_training()};
  model.eval();
  autograd::NoGradGuard ng;
  int64_t correct = 0, seen = 0;
  // A rank's shard may end in a padding sample (a repeat of another rank's), which is not
  // counted: the job's accuracy is over the test set once, whatever the number of ranks.
  const int64_t unpadded = loader.unpadded_samples();
  loader.begin_epoch(0);
  while (auto batch = loader.next()) {
    const int64_t rows = std::min(batch->images.size(0), std::max<int64_t>(unpadded - seen, 0));
    correct += correct_count(model.forward(batch->images), batch->labels, rows);
    seen += rows;
  }
  if (group != nullptr) {
    std::vector<double> totals = dist::all_reduce_values(
        *group, {static_cast<double>(correct), static_cast<double>(seen)}, dist::ReduceOp::sum);
    correct = static_cast<int64_t>(totals[0]);
    seen = static_cast<int64_t>(totals[1]);
  }
  return seen > 0 ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
}

}  // namespace frugal::train
