// The knobs every model of the zoo takes: classes, input channels, a width multiplier and the
// two regularisers (classifier dropout, EfficientNet's stochastic depth).
#pragma once

#include <cstdint>

namespace frugal::models {

struct ModelConfig {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  // Channel multiplier; every width is rounded with make_divisible(c * width, 8) as torchvision
  // does, so width 1.0 gives the reference layouts exactly.
  double width = 1.0;
  double dropout = 0.2;       // before the classifier's Linear
  double drop_connect = 0.2;  // EfficientNet stochastic depth, the deepest block's probability
};

// Throws frugal::Error naming `model` and the bad field when a value is out of range.
void check_config(const char* model, const ModelConfig& cfg);

}  // namespace frugal::models
