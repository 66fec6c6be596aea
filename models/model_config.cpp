// Range checks of a ModelConfig, shared by every model's constructor.
#include "models/model_config.h"

#include <cmath>

#include "base/error.h"

namespace frugal::models {

void check_config(const char* model, const ModelConfig& cfg) {
  FRUGAL_CHECK(cfg.num_classes > 0, model, ": num_classes must be positive, got ", cfg.num_classes);
  FRUGAL_CHECK(cfg.in_channels > 0, model, ": in_channels must be positive, got ", cfg.in_channels);
  FRUGAL_CHECK(cfg.width > 0 && std::isfinite(cfg.width), model, ": width must be positive, got ",
               cfg.width);
  FRUGAL_CHECK(cfg.dropout >= 0 && cfg.dropout <= 1, model, ": dropout must be in [0, 1], got ",
               cfg.dropout);
  FRUGAL_CHECK(cfg.drop_connect >= 0 && cfg.drop_connect <= 1, model,
               ": drop_connect must be in [0, 1], got ", cfg.drop_connect);
}

}  // namespace frugal::models
