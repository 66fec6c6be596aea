// What a `frugal train --save` checkpoint was trained with (model, width, image size, data), kept
// in its __metadata__ beside the training state, so that `frugal eval` builds the same model and
// feeds it images of the size it learned from without being told.
//
// Note [What eval takes from a checkpoint]
// A model with global average pooling runs on any image size, so evaluating at another size
// than the training one gives a wrong accuracy and no error (69% at 16x16 read as 12% at 32x32).
// eval therefore defaults --model, --width, --image-size and --data to the checkpoint's. A
// --model or --width that contradicts it is refused (the weights would not load anyway, after a
// list of every tensor); another --image-size or --data is allowed (a resolution experiment) and
// said. Files without these entries (model files, older checkpoints) leave the flags' defaults.
#pragma once

#include <optional>
#include <string>

#include "train/safetensors.h"

namespace frugal::tools {

struct TrainedWith {
  std::string model;
  double width = 1.0;
  int64_t image_size = 0;
  std::string data;

  // Entries for TrainingState::extra ("train.model", ...).
  train::Metadata metadata() const;
  // Read back; nullopt when the file has none of them. `path` names the file in errors about a
  // malformed entry.
  static std::optional<TrainedWith> from(const train::Metadata& metadata, const std::string& path);
};

}  // namespace frugal::tools
