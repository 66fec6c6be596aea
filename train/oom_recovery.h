// Out-of-memory recovery for training steps (`frugal train --oom-recover`): a step that runs out
// of memory is undone and tried again as micro-batches with gradient accumulation, then with
// checkpointing, and the choice sticks for the steps after it.
//
//   train::OomRecovery recovery;  // or {.enable_checkpointing = [&] { ...; return true; }}
//   Tensor loss = recovery.run(model, opt, scaler, images.size(0), [&](int64_t micro_batches) {
//     return train::train_step(model, opt, images, labels, DType::f16, scaler, 0.0, micro_batches);
//   });
//
// Note [Recovering from out of memory]
// What a failed attempt may have changed, and how run_undoable puts it back:
// - weights and optimizer state: untouched. The optimizers make every missing state tensor
//   before they store any or update a weight, and their update kernels allocate nothing, so an
//   out-of-memory error anywhere in the step comes before the first change.
// - the GradScaler: its scale and growth tracker change only in update(), the step's last
//   action, which allocates nothing; abandon_step() forgets the failed step's unscale_/step
//   bookkeeping so that the retry may call them again.
// - module buffers (BatchNorm's running statistics, updated in the forward): copied before the
//   step, written back after a failure.
// - the default generator's offset: set back, so that the retry draws the same dropout masks.
// - gradients: the failed step's, dropped by the retry's zero_grad (train_step starts with it).
// The copies cost one small allocation per buffer and step, only while recovery is on.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace frugal::train {

// Runs step() so that an OutOfMemoryError or a BatchTooSmallError (nn/functional.h) leaves the
// model's weights and buffers, the optimizer and the scaler as they were before it (Note
// [Recovering from out of memory]), then rethrows; other errors pass as they are.
Tensor run_undoable(nn::Module& model, optim::Optimizer& opt, optim::GradScaler* scaler,
                    const std::function<Tensor()>& step);

struct OomRecoveryOptions {
  // Turns checkpointing on in the model when micro-batches of one row still do not fit; returns
  // false when it cannot (or it is on already). Null: no checkpointing rung.
  std::function<bool()> enable_checkpointing = nullptr;
  // Called with one line for each change of plan; null prints it to stderr.
  std::function<void(const std::string&)> log = nullptr;
};

class OomRecovery {
 public:
  explicit OomRecovery(OomRecoveryOptions options = {}, int64_t micro_batches = 1);

  // Runs step(m) with the current micro-batches m (at most `rows`, the batch's rows) through
  // run_undoable. On an OutOfMemoryError: releases cached memory, doubles m (up to `rows`), and
  // once m == rows turns checkpointing on and starts again from one micro-batch; rethrows when
  // neither is left. A BatchTooSmallError at micro-batches it chose (slices too small for
  // BatchNorm) moves on to checkpointing the same way; at the run's own micro-batches it, and
  // any other error, is rethrown.
  Tensor run(nn::Module& model, optim::Optimizer& opt, optim::GradScaler* scaler, int64_t rows,
             const std::function<Tensor(int64_t micro_batches)>& step);

  int64_t micro_batches() const { return micro_batches_; }
  bool checkpointing() const { return checkpointing_; }
  // Failed attempts recovered from: out of memory, or slices too small for the model.
  int64_t recoveries() const { return recoveries_; }

 private:
  OomRecoveryOptions options_;
  int64_t micro_batches_;
  int64_t given_micro_batches_;  // the run's own: a shape it chose itself is never retried away
  bool checkpointing_ = false;
  int64_t recoveries_ = 0;
};

}  // namespace frugal::train
