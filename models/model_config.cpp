// Range checks of a ModelConfig, shared by every model's constructor.
#include "models/model_config.h"

#include <cmath>

#include "base/error.h"
#include "nn/checkpoint.h"

namespace frugal::models {

CheckpointPolicy CheckpointPolicy::parse(const std::string& text) {
  if (text == "none") return {};
  if (text == "blocks") return {Mode::blocks, 0};
  if (text.rfind("first:", 0) == 0) {
    size_t used = 0;
    int64_t k = 0;
    try {
      k = std::stoll(text.substr(6), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FRUGAL_CHECK(used > 0 && used == text.size() - 6 && k > 0,
                 "checkpoint: expected first:K with a positive K, got '", text, "'");
    return {Mode::first, 0, k};
  }
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  FRUGAL_CHECK(used == text.size() && !text.empty() && n > 0,
               "checkpoint: expected none, blocks, first:K or a positive number of segments, got '",
               text, "'");
  return {Mode::segments, n};
}

std::string CheckpointPolicy::str() const {
  switch (mode) {
    case Mode::none:
      return "none";
    case Mode::blocks:
      return "blocks";
    case Mode::first:
      return "first:" + std::to_string(first);
    case Mode::segments:
      return std::to_string(segments);
  }
  return "?";
}

std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>)>
CheckpointPolicy::block_wrapper() const {
  return [mode = mode, first = first, index = int64_t{0}](
             std::shared_ptr<nn::Module> block) mutable -> std::shared_ptr<nn::Module> {
    const bool wrap = mode == Mode::blocks || (mode == Mode::first && index < first);
    ++index;
    return wrap ? std::make_shared<nn::Checkpoint>(std::move(block)) : block;
  };
}

Tensor CheckpointPolicy::run_features(const nn::Sequential& seq, const Tensor& x) const {
  autograd::ModuleScope scope(seq.name());
  if (mode != Mode::segments) return seq.forward_range(0, static_cast<int64_t>(seq.size()), x);
  return nn::checkpoint_sequential(seq, segments, x);
}

void check_config(const char* model, const ModelConfig& cfg) {
  FRUGAL_CHECK(cfg.num_classes > 0, model, ": num_classes must be positive, got ", cfg.num_classes);
  FRUGAL_CHECK(cfg.in_channels > 0, model, ": in_channels must be positive, got ", cfg.in_channels);
  FRUGAL_CHECK(cfg.width > 0 && std::isfinite(cfg.width), model, ": width must be positive, got ",
               cfg.width);
  FRUGAL_CHECK(cfg.dropout >= 0 && cfg.dropout <= 1, model, ": dropout must be in [0, 1], got ",
               cfg.dropout);
  FRUGAL_CHECK(cfg.drop_connect >= 0 && cfg.drop_connect <= 1, model,
               ": drop_connect must be in [0, 1], got ", cfg.drop_connect);
  FRUGAL_CHECK(
      cfg.checkpoint.mode != CheckpointPolicy::Mode::segments || cfg.checkpoint.segments > 0, model,
      ": checkpoint segments must be positive, got ", cfg.checkpoint.segments);
  FRUGAL_CHECK(cfg.checkpoint.mode != CheckpointPolicy::Mode::first || cfg.checkpoint.first > 0,
               model, ": checkpoint first:K needs a positive K, got ", cfg.checkpoint.first);
}

}  // namespace frugal::models
