// The knobs every model of the zoo takes: classes, input channels, a width multiplier and the
// two regularisers (classifier dropout, EfficientNet's stochastic depth).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "nn/module.h"

namespace frugal::models {

// Activation checkpointing of a model (Note [Checkpointing] in nn/checkpoint.h), the one policy
// the models and the command line read (`--checkpoint none|blocks|N`).
struct CheckpointPolicy {
  enum class Mode { none, blocks, first, segments };
  Mode mode = Mode::none;
  int64_t segments = 0;  // with Mode::segments: checkpoint_sequential over the feature layers
  // with Mode::first: only the first `first` blocks (the stem is block 0 in MobileNetV1/V2 and
  // EfficientNet; ResNet's stem is no block, so its block 0 is layer1.0)
  int64_t first = 0;

  // "none", "blocks", "first:K" (the first K blocks, the largest activations of a CNN) or a count
  // of segments.
  static CheckpointPolicy parse(const std::string& text);
  std::string str() const;
  // Wraps one model's blocks, handed to it in forward order: in nn::Checkpoint under
  // Mode::blocks, the first `first` of them under Mode::first, none otherwise.
  std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>)> block_wrapper() const;
  // seq.forward(x), or checkpointed in `segments` runs under Mode::segments.
  Tensor run_features(const nn::Sequential& seq, const Tensor& x) const;
};

struct ModelConfig {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  // Channel multiplier; every width is rounded with make_divisible(c * width, 8) as torchvision
  // does, so width 1.0 gives the reference layouts exactly.
  double width = 1.0;
  double dropout = 0.2;  // before the classifier's Linear
  // EfficientNet stochastic depth: the scale of torchvision's linear schedule, block i of n
  // dropping with probability drop_connect * i / n (block 0 never; the deepest 0.2 * 15/16).
  double drop_connect = 0.2;
  CheckpointPolicy checkpoint{};  // none by default: the lean saved state alone
  // Inverted-residual (MBConv) blocks recompute their depthwise conv's output in backward from
  // the expand conv's output instead of keeping it (Note [Recomputed convolutions] in
  // nn/functional.h): less than one kept tensor per layer, for one more depthwise pass.
  bool recompute_depthwise = false;
};

// Throws frugal::Error naming `model` and the bad field when a value is out of range.
void check_config(const char* model, const ModelConfig& cfg);

}  // namespace frugal::models
