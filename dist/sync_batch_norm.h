// SyncBatchNorm for data-parallel training (PyTorch's nn.SyncBatchNorm.convert_sync_batchnorm):
// every BatchNorm2d of a model normalises with the statistics of all ranks' batches together,
// so small per-GPU batches train like one large batch.
//
//   dist::convert_sync_batchnorm(*model, group);  // before wrapping it in DataParallel
//
// Note [Synchronised batch norm]
// Each training forward of a converted layer sums per-channel sums, sums of squares and row
// counts across ranks (one all-reduce of 2C + 1 f32 values) and normalises with the global
// mean and variance (functional::sync_batch_norm); backward sums those statistics' gradients
// across ranks the same way, so every rank's input gradient is that of the global batch.
// Evaluation uses the running statistics, updated identically on every rank. The layers keep
// their parameters and names (checkpoints load either way) and save what the fused batch norm
// saves (x and per-channel statistics), but run as several ops rather than one fused kernel,
// and each layer costs two small collectives a step: an option, off by default (BatchNorm
// stays local, as in DDP).
#pragma once

#include <cstdint>
#include <memory>

#include "dist/process_group.h"
#include "nn/module.h"

namespace frugal::dist {

// t summed over the group's ranks, differentiably: its backward sums the incoming gradient the
// same way (each rank's gradient of the summed tensor counts on every rank).
Tensor all_reduce_sum(const Tensor& t, const std::shared_ptr<ProcessGroup>& group);

// Makes every BatchNorm2d of `model` synchronised over `group`; returns how many.
int64_t convert_sync_batchnorm(nn::Module& model, const std::shared_ptr<ProcessGroup>& group);

}  // namespace frugal::dist
