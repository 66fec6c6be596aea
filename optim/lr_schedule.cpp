// StepLR and cosine-with-warm-up schedules.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace frugal::optim {

void LrSchedule::jump_to(int64_t step) {
  FRUGAL_CHECK(step >= 0, "LrSchedule::jump_to: step ", step, " is negative");
  opt_.set_lr(lr_at(step));
  step_ = step;
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LrSchedule(opt), step_size_(step_size), gamma_(gamma) {
  FRUGAL_CHECK(step_size > 0, "StepLR: step_size must be > 0, got ", step_size);
  // Checked here, not at the step whose rate would be negative or NaN, hours into a run.
  FRUGAL_CHECK(gamma >= 0 && std::isfinite(gamma), "StepLR: gamma must be finite and >= 0, got ",
               gamma);
}

double StepLR::lr_at(int64_t step) const {
  return base_lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

CosineWarmup::CosineWarmup(Optimizer& opt, CosineWarmupOptions o) : LrSchedule(opt), o_(o) {
  FRUGAL_CHECK(o.total_steps > 0 && o.warmup_steps >= 0 && o.warmup_steps <= o.total_steps,
               "CosineWarmup: need 0 <= warmup_steps (", o.warmup_steps, ") <= total_steps (",
               o.total_steps, ") and total_steps > 0");
  FRUGAL_CHECK(o.min_lr >= 0 && std::isfinite(o.min_lr),
               "CosineWarmup: min_lr must be finite and >= 0, got ", o.min_lr);
  if (o.warmup_steps > 0) opt.set_lr(lr_at(0));
}

double CosineWarmup::lr_at(int64_t step) const {
  if (step < o_.warmup_steps) {
    return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(o_.warmup_steps);
  }
  int64_t span = std::max<int64_t>(o_.total_steps - o_.warmup_steps, 1);
  double t = std::min(1.0, static_cast<double>(step - o_.warmup_steps) / static_cast<double>(span));
  return o_.min_lr + 0.5 * (base_lr_ - o_.min_lr) * (1.0 + std::cos(std::numbers::pi * t));
}

}  // namespace frugal::optim
