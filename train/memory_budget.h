// Fitting a training step into a memory budget by prediction (frugal train --memory-budget).
//
// Note [Fitting a memory budget]
// The cheapest way that fits, tried in this order, each judged by the step's predicted peak
// (train::estimate_memory, a dry run on meta counted for CUDA):
//   1. the plain step;
//   2. checkpointing the fewest leading blocks (CheckpointPolicy first:K): a CNN's first blocks
//      hold the largest activations for the fewest FLOPs, so they free the most memory per
//      recomputed FLOP;
//   3. micro-batches (2, 4, 8, ... slices with gradient accumulation, train_step's
//      micro_batches): the same effective batch and the same gradients but for BatchNorm, which
//      normalises each slice with its own statistics;
//   4. micro-batches with every block checkpointed.
// The prediction counts cuBLAS's and cuDNN's workspace but not the few MiB other kernels ask for
// (Note [What the estimate counts]): a budget run also caps the allocator at the budget, so it
// stops with an OOM rather than exceed it. The cap is on reserved bytes, so a way fits when its
// predicted peak, what the run keeps beside the step (BudgetExtras: the loader's staged batch)
// and kReservedHeadroom of the peak for what reserved holds beyond allocated (segments' rounding,
// the arena's packing: 1.7-2.1% measured on MobileNetV2, bench/RESULTS.md) are within the budget.
// An error of the plain step (BatchNorm on a batch of one, say) is the caller's to see; a way
// that cannot run (micro-batches of one image) is passed over.
//
//   train::BudgetChoice c = train::choose_for_budget("mobilenet_v2", {}, {512, 224, 224, 3},
//                                                    DType::f16, "sgd", int64_t{3} << 30);
//   c.str();  // "4 micro-batches, predicted peak 2129.4 MiB" (bench/RESULTS.md, the H200)
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "base/shape.h"
#include "models/registry.h"
#include "train/model_wrapper.h"

namespace frugal::train {

struct BudgetChoice {
  models::CheckpointPolicy checkpoint;
  int64_t micro_batches = 1;
  // Of the choice, or of the last one tried when nothing fits: the step's predicted peak and
  // BudgetExtras::resident_bytes, without the headroom.
  int64_t predicted_peak_bytes = 0;
  bool fits = false;
  std::string str() const;
};

// What the run adds around the step the prediction dry-runs.
struct BudgetExtras {
  // Device bytes live through every step beside it: the loader's staged next batch
  // (data::staged_device_bytes).
  int64_t resident_bytes = 0;
  ModelWrapper wrap = nullptr;  // data parallelism: wraps the dry run's model as the run's
};

// Reserved bytes a way needs beyond its allocated peak, as a fraction of that peak.
constexpr double kReservedHeadroom = 0.05;

// What a way with predicted peak `peak` needs under a --memory-budget cap: the peak, what the
// run keeps beside the step, and the headroom. (estimate --max-batch answers for the step alone.)
int64_t budget_need(int64_t peak, int64_t resident_bytes);

// Predicted for a CUDA device unless `for_cuda` is false (the CPU's allocator).
BudgetChoice choose_for_budget(const std::string& name, const models::ModelConfig& base,
                               const Shape& input_nhwc, DType precision,
                               const std::string& optimizer, int64_t budget, bool for_cuda = true,
                               const BudgetExtras& extras = {});

}  // namespace frugal::train
