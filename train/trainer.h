// The training loop users call from C++ and the `frugal train` command runs: one epoch of
// forward / loss / backward / step with a progress line, and evaluation (accuracy).
//
//   train::EpochStats s = train::train_epoch(*model, opt, &sched, loader, epoch, {.label_smoothing
//   = 0.1}); double acc = train::evaluate(*model, test_loader);
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "data/loader.h"
#include "dist/process_group.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/oom_recovery.h"
#include "train/step_callbacks.h"
#include "train/step_planner.h"

namespace frugal::train {

struct EpochStats {
  double loss = 0;  // mean training loss over the epoch
  int64_t samples = 0;
  double seconds = 0;
  double images_per_second = 0;
  int64_t peak_allocated = 0;  // device allocator peak during the epoch, bytes
  int64_t peak_reserved = 0;
};

// Called every `every` steps (and at the end) with progress; the default prints one line.
struct Progress {
  int64_t epoch = 0, epochs = 0, step = 0, steps = 0;
  double loss = 0, images_per_second = 0;
  int64_t allocated = 0;
};
using ProgressFn = std::function<void(const Progress&)>;

struct EpochOptions {
  double label_smoothing = 0.0;
  int64_t epochs = 1;  // for the progress line only
  int64_t log_every = 20;
  ProgressFn progress = nullptr;  // null: print a progress bar to stderr
  // Mixed precision: f16 or bf16 runs forward and loss under an AutocastGuard for the
  // parameters' device; f32 runs without. f16 needs `scaler` (the caller owns it so its scale
  // carries over between epochs); bf16 needs none. A given scaler is used whatever the precision.
  DType precision = DType::f32;
  optim::GradScaler* scaler = nullptr;
  // Replay the step from a CUDA graph (Note [Captured training steps] in captured_step.h):
  // the epoch's first batch runs eagerly, the second is captured, and later batches of the same
  // shape are copied into the captured step's inputs and replayed; a batch of another shape (a
  // last partial batch) runs eagerly. The optimizer is made to keep its learning rate on the
  // device (Note [Learning rate on the device]), so a schedule steps replayed steps too. Eager
  // wherever graphs are not available.
  bool graph = false;
  // Plan the step's memory (Note [Planned steps] in memory/step_trace.h, train/step_planner.h):
  // each step runs through `planner` (the caller owns it, so its plans carry over between
  // epochs), except a batch whose shape differs from the epoch's first. With `graph` the warm-up
  // runs through it and the capture goes into its arena (Note [Captured training steps]).
  StepPlanner* planner = nullptr;
  // Gradient accumulation over this many slices of each batch (train_step's micro_batches).
  int64_t micro_batches = 1;
  // Called at the points of every step and at the epoch's end (Note [Step points] in
  // step_callbacks.h); the caller owns them, so their step count runs across epochs.
  StepCallbacks* callbacks = nullptr;
  // Steps that run out of memory are undone and retried smaller (Note [Recovering from out of
  // memory] in oom_recovery.h); its micro-batches replace `micro_batches`. The caller owns it so
  // its choice sticks across epochs. Not used for steps replayed from a graph.
  OomRecovery* oom_recovery = nullptr;
};

// One optimisation step on a batch (zero_grad, forward and loss, backward, step): forward and
// loss run under an AutocastGuard on the model's device when `precision` is f16 or bf16; with a
// `scaler` the loss is scaled and the step is skipped on the device when a gradient overflowed.
// Returns the loss without reading it back.
// `micro_batches` > 1 accumulates gradients over that many slices of the batch (Note
// [Micro-batches] in trainer.cpp): the peak memory of a smaller batch, one optimizer step with
// the whole batch's mean loss gradient, but for BatchNorm's per-slice statistics.
// `callbacks` fire at the step's inner points (Note [Step points] in step_callbacks.h).
Tensor train_step(nn::Module& model, optim::Optimizer& opt, const Tensor& images,
                  const Tensor& labels, DType precision = DType::f32,
                  optim::GradScaler* scaler = nullptr, double label_smoothing = 0.0,
                  int64_t micro_batches = 1, const StepCallbacks* callbacks = nullptr);

// Trains `model` for one pass over `loader` (begin_epoch(epoch) is called here). `schedule`
// (nullable) is stepped after each optimizer step. Loss values are read back only every
// log_every steps so the host does not wait on the device each step.
EpochStats train_epoch(nn::Module& model, optim::Optimizer& opt, optim::LrSchedule* schedule,
                       data::DataLoader& loader, int64_t epoch, const EpochOptions& options = {});

// Top-1 accuracy of `model` (put in eval mode for the pass, then restored) over `loader`. With a
// `group`, each rank evaluates its loader's shard and the counts are summed across ranks: every
// rank returns the accuracy over all shards.
double evaluate(nn::Module& model, data::DataLoader& loader, dist::ProcessGroup* group = nullptr);

// One epoch's statistics over every rank of `group`: samples summed, the loss their weighted
// mean, the time the slowest rank's, images per second the whole job's; peaks the largest rank's.
EpochStats reduce_across(const EpochStats& local, dist::ProcessGroup& group);

// The progress bar used when EpochOptions::progress is null.
void print_progress(const Progress& p);

}  // namespace frugal::train
