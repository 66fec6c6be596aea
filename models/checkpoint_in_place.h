// Turns activation checkpointing on in a model already built and training: what the "blocks"
// checkpoint policy wraps at construction (the blocks, InvertedResidual, DepthwiseSeparable, MBConv
// and BasicBlock, and the stem and head convolutions beside them) is wrapped in nn::Checkpoint
// where it stands. Parameters and buffers stay the same tensors under the same names, so the
// optimizer keeps its state and checkpoints still load: what --oom-recover does when micro-batches
// of one row do not fit (train/oom_recovery.h).
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace frugal::models {

// Returns how many blocks it wrapped: 0 when there are none, or they are checkpointed already.
int64_t checkpoint_blocks_in_place(nn::Module& model);

}  // namespace frugal::models
