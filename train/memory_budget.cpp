// The budget search of Note [Fitting a memory budget].
#include "train/memory_budget.h"

#include <cstdio>

#include "base/error.h"
#include "core/factory.h"
#include "nn/construction_device.h"
#include "train/memory_estimate.h"

namespace frugal::train {

namespace {

// How many blocks `name` hands to its checkpoint policy (the stem and last conv included where
// the model wraps them).
int64_t count_blocks(const std::string& name, models::ModelConfig config) {
  config.checkpoint = models::CheckpointPolicy::parse("blocks");
  nn::ConstructionDeviceGuard on_meta(Device::meta());  // its shape is all that counts
  // Building on meta still draws the initialisation (Note [Building modules on the meta
  // device]): the run's own model, built after the search, must start from the same stream.
  GeneratorStateGuard keep_stream;
  auto model = models::create(name, config);
  int64_t n = 0;
  for (const auto& [path, m] : model->named_modules()) n += m->type_name() == "Checkpoint";
  return n;
}

}  // namespace

std::string BudgetChoice::str() const {
  char line[200];
  std::string how;
  if (checkpoint.mode == models::CheckpointPolicy::Mode::none && micro_batches == 1) {
    how = "the plain step";
  } else {
    if (checkpoint.mode != models::CheckpointPolicy::Mode::none) {
      how = "checkpoint " + checkpoint.str();
    }
    if (micro_batches > 1) {
      how +=
          std::string(how.empty() ? "" : ", ") + std::to_string(micro_batches) + " micro-batches";
    }
  }
  std::snprintf(line, sizeof line, "%s%s, predicted peak %.1f MiB", fits ? "" : "nothing fits; ",
                how.c_str(), static_cast<double>(predicted_peak_bytes) / (1024.0 * 1024.0));
  return line;
}

int64_t budget_need(int64_t peak, int64_t resident_bytes) {
  return peak + resident_bytes +
         static_cast<int64_t>(kReservedHeadroom * static_cast<double>(peak));
}

BudgetChoice choose_for_budget(const std::string& name, const models::ModelConfig& base,
                               const Shape& input_nhwc, DType precision,
                               const std::string& optimizer, int64_t budget, bool for_cuda,
                               const BudgetExtras& extras) {
  FRUGAL_CHECK(extras.resident_bytes >= 0, "choose_for_budget: resident_bytes must be >= 0, got ",
               extras.resident_bytes);
  BudgetChoice c;
  bool first = true;  // the plain step's error is the caller's; a later way's is passed over
  auto attempt = [&](const models::CheckpointPolicy& policy, int64_t micro) {
    models::ModelConfig config = base;
    config.checkpoint = policy;
    int64_t peak = 0;
    auto predict = [&] {
      return estimate_memory(name, config, input_nhwc, precision, optimizer, micro, for_cuda,
                             /*with_arena=*/false, extras.wrap)
          .peak_allocated_bytes;
    };
    if (first) {
      first = false;
      peak = predict();
    } else {
      try {
        peak = predict();
      } catch (const Error&) {
        return false;  // a way that cannot run at all (BatchNorm on slices of one image, say)
      }
    }
    c.checkpoint = policy;
    c.micro_batches = micro;
    c.predicted_peak_bytes = peak + extras.resident_bytes;
    c.fits = budget_need(peak, extras.resident_bytes) <= budget;
    return c.fits;
  };
  if (attempt(base.checkpoint, 1)) return c;
  const int64_t blocks = count_blocks(name, base);
  for (int64_t k = 1; k < blocks; ++k) {
    if (attempt({models::CheckpointPolicy::Mode::first, 0, k}, 1)) return c;
  }
  if (attempt(models::CheckpointPolicy::parse("blocks"), 1)) return c;
  for (const char* policy : {"none", "blocks"}) {
    for (int64_t m = 2; m <= input_nhwc[0]; m *= 2) {
      if (attempt(models::CheckpointPolicy::parse(policy), m)) return c;
    }
  }
  return c;
}

}  // namespace frugal::train
