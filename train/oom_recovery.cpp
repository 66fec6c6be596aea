#include "train/oom_recovery.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "memory/allocator.h"
#include "nn/functional.h"

namespace frugal::train {

Tensor run_undoable(nn::Module& model, optim::Optimizer& opt, optim::GradScaler* scaler,
                    const std::function<Tensor()>& step) {
  const uint64_t offset = default_generator().offset();
  std::vector<std::pair<Tensor, Tensor>> buffers;  // (buffer, its copy before the step)
  {
    autograd::NoGradGuard ng;
    for (const auto& [name, b] : model.named_buffers()) buffers.emplace_back(b, b.clone());
  }
  // Out of memory, or a batch too small for the model (a shape recovery chose), is undone: both
  // come before the optimizer step. Any other error passes as it is (one after the optimizer
  // step, which fire_after_optimizer reports as a plain Error, must not be undone).
  auto undo = [&] {
    autograd::NoGradGuard ng;
    for (auto& [b, saved] : buffers) copy_(b, saved);  // same device and size: no allocation
    default_generator().set_offset(offset);
    if (scaler != nullptr) scaler->abandon_step();
    opt.zero_grad();  // the failed step's partial gradients
  };
  try {
    return step();
  } catch (const OutOfMemoryError&) {
    undo();
    throw;
  } catch (const nn::functional::BatchTooSmallError&) {
    undo();
    throw;
  }
}

OomRecovery::OomRecovery(OomRecoveryOptions options, int64_t micro_batches)
    : options_(std::move(options)),
      micro_batches_(micro_batches),
      given_micro_batches_(micro_batches) {
  FRUGAL_CHECK(micro_batches >= 1, "OomRecovery: micro_batches must be >= 1, got ", micro_batches);
}

Tensor OomRecovery::run(nn::Module& model, optim::Optimizer& opt, optim::GradScaler* scaler,
                        int64_t rows, const std::function<Tensor(int64_t)>& step) {
  FRUGAL_CHECK(rows >= 1, "OomRecovery::run: a batch of ", rows, " rows");
  auto log = [&](const std::string& line) {
    if (options_.log) {
      options_.log(line);
    } else {
      std::fprintf(stderr, "frugal: %s\n", line.c_str());
    }
  };
  for (;;) {
    const int64_t m = std::min(micro_batches_, rows);
    try {
      return run_undoable(model, opt, scaler, [&] { return step(m); });
    } catch (const OutOfMemoryError& e) {
      Device device = opt.params().empty() ? Device::cpu() : opt.params()[0].device();
      memory::allocator_for(device).empty_cache();
      std::string what = "out of memory in a step of " + std::to_string(rows) + " rows as " +
                         std::to_string(m) + " micro-batch" + (m == 1 ? "" : "es") +
                         (checkpointing_ ? " with checkpointing" : "");
      if (m < rows) {
        micro_batches_ = std::min(m * 2, rows);
        log(what + "; retrying as " + std::to_string(micro_batches_) +
            " micro-batches with gradient accumulation (weights and optimizer state untouched)");
      } else if (!checkpointing_ && options_.enable_checkpointing &&
                 options_.enable_checkpointing()) {
        checkpointing_ = true;
        micro_batches_ = 1;
        log(what + "; retrying with checkpointing, as one micro-batch");
      } else {
        log(what + "; nothing left to try");
        throw;
      }
      ++recoveries_;
    } catch (const nn::functional::BatchTooSmallError& e) {
      // Slices this recovery chose may be too small for the model: BatchNorm needs more than
      // one value a channel, and at 1x1 a slice of one row has one. The step as the user gave
      // it fails as it would without recovery; a chosen shape gives way to the next rung.
      if (m <= given_micro_batches_) throw;
      const std::string what = "a step of " + std::to_string(rows) + " rows as " +
                               std::to_string(m) + " micro-batches cannot run (" + e.what() + ")";
      if (!checkpointing_ && options_.enable_checkpointing && options_.enable_checkpointing()) {
        checkpointing_ = true;
        micro_batches_ = 1;
        log(what + "; retrying with checkpointing, as one micro-batch");
        ++recoveries_;
        continue;
      }
      log(what + "; nothing left to try");
      throw;
    }
  }
}

}  // namespace frugal::train
