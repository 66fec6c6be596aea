// The f32-vs-AMP comparison behind `frugal compare` and examples/amp_memory_compare.cpp: the same
// model from the same seed trained a few steps on the same fixed batch in f32, f16 (autocast +
// GradScaler) and bf16 (autocast), with peak memory, throughput and loss, and each one's ratio
// to f32; rendered as a text table, JSON and an SVG bar chart.
//
//   train::CompareOptions o{.model = "mobilenet_v2", .batch = 128, .device = Device::cuda()};
//   std::vector<train::CompareRow> rows = train::compare_precisions(o);
//   std::fputs(train::to_table(o, rows).c_str(), stdout);
//
// Note [What the compare peak measures]: each precision starts from an emptied allocator cache;
// the peak statistics are reset right after the model is built and moved to the device, so the
// peaks cover the f32 parameters, the fixed batch, the gradients, the momentum buffers, the
// autocast weight copies and every activation and temporary of the warm-up and timed steps.
// Reserved is what the allocator held from the system at its highest (the caching allocator's
// segments on CUDA; equal to allocated on the CPU, which caches nothing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/dtype.h"
#include "models/model_config.h"

namespace frugal::train {

struct CompareOptions {
  std::string model = "mobilenet_v2";
  int64_t batch = 128;
  int64_t channels = 3, height = 224, width = 224;  // input C x H x W (stored NHWC)
  int64_t classes = 1000;
  double width_multiplier = 1.0;
  int64_t warmup = 3;  // untimed steps before the timed ones (cuDNN algorithm search, caches)
  int64_t steps = 20;  // timed steps
  uint64_t seed = 0;
  Device device = Device::cpu();
  double lr = 0.05;  // SGD; small enough that 23 steps on one batch stay finite
  double momentum = 0.9;
  // Replay the timed steps from a CUDA graph captured in the last warm-up step (Note [Captured
  // training steps] in train/captured_step.h), or once the planner has settled; needs
  // warmup >= 2; eager on the CPU.
  bool graph = false;
  models::CheckpointPolicy checkpoint{};  // --checkpoint none|blocks|N
  // Plan each step's memory before the first (train/step_planner.h); CUDA only. With graph, the
  // capture lives in the planner's arena.
  bool planner = true;
  bool recompute_depthwise = false;  // ModelConfig::recompute_depthwise
};

struct CompareRow {
  DType precision = DType::f32;
  int64_t peak_allocated = 0;  // bytes, Note [What the compare peak measures]
  int64_t peak_reserved = 0;
  double median_step_ms = 0;     // of the timed steps
  double images_per_second = 0;  // batch / median step time
  double first_loss = 0;  // loss of the first step (same weights and batch: close across rows)
  double loss = 0;        // loss of the last step, after warmup + steps - 1 updates
  // f16's final loss scale (65536 at the start, halved on every overflowing step, which is then
  // skipped: early on that explains a loss that differs from f32's); 1 for f32 and bf16.
  double loss_scale = 1;
  // Each value over the f32 row's (1 for the f32 row; 0 when f32's value is 0).
  double peak_allocated_ratio = 1, peak_reserved_ratio = 1, images_per_second_ratio = 1,
         loss_ratio = 1;
};

// Trains a fresh model at `precision` (f32, f16 or bf16) as described above and measures it.
// Ratios are left at 1; compare_precisions fills them. Everything it allocated is freed when it
// returns (the caller empties the allocator cache).
CompareRow run_precision(const CompareOptions& options, DType precision);

// run_precision for f32, f16 and bf16 in that order, emptying the device allocator's cache
// before each, with the ratios to the f32 row filled in.
std::vector<CompareRow> compare_precisions(const CompareOptions& options);

// Fills the *_ratio fields of every row from the row whose precision is f32 (throws if none).
void fill_ratios(std::vector<CompareRow>& rows);

// A fixed-width table, one line per precision, each value followed by its ratio to f32.
std::string to_table(const CompareOptions& options, const std::vector<CompareRow>& rows);
// One JSON object: the configuration and a "rows" array, one object per precision.
std::string to_json(const CompareOptions& options, const std::vector<CompareRow>& rows);
// A standalone SVG bar chart: groups peak allocated, peak reserved and img/s, one bar per
// precision in each, height = ratio to f32, labelled with the ratio and the absolute value.
std::string to_svg(const CompareOptions& options, const std::vector<CompareRow>& rows);

}  // namespace frugal::train
