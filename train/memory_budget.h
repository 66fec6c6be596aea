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
// stops with an OOM rather than exceed it.
//
//   train::BudgetChoice c = train::choose_for_budget("mobilenet_v2", {}, {512, 224, 224, 3},
//                                                    DType::f16, "sgd", int64_t{3} << 30);
//   c.str();  // "checkpoint first:6, predicted peak 2,990.1 MiB"
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "base/shape.h"
#include "models/registry.h"

namespace frugal::train {

struct BudgetChoice {
  models::CheckpointPolicy checkpoint;
  int64_t micro_batches = 1;
  int64_t predicted_peak_bytes = 0;  // of the choice; of the last one tried when nothing fits
  bool fits = false;
  std::string str() const;
};

// Predicted for a CUDA device unless `for_cuda` is false (the CPU's allocator).
BudgetChoice choose_for_budget(const std::string& name, const models::ModelConfig& base,
                               const Shape& input_nhwc, DType precision,
                               const std::string& optimizer, int64_t budget, bool for_cuda = true);

}  // namespace frugal::train
