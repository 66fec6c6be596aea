// Learning-rate schedules, stepped once per optimizer step (or per epoch for StepLR if you like).
//
//   optim::CosineWarmup sched(opt, {.warmup_steps = 100, .total_steps = 5000});
//   for (...) { ...; opt.step(); sched.step(); }
#pragma once

#include <cstdint>

#include "optim/optimizer.h"

namespace frugal::optim {

class LrSchedule {
 public:
  // Starts from the optimizer's schedule_base_lr(): its rate when the first schedule was made on
  // it, or the one its loaded state recorded; not its current rate, which a schedule made before
  // this one or a loaded state may have decayed already.
  explicit LrSchedule(Optimizer& opt) : opt_(opt), base_lr_(opt.schedule_base_lr()) {}
  virtual ~LrSchedule() = default;
  virtual double lr_at(int64_t step) const = 0;
  // Advances one step and sets the optimizer's learning rate; a rate the optimizer refuses
  // throws before the step count moves.
  void step() {
    opt_.set_lr(lr_at(step_ + 1));
    ++step_;
  }
  // Where `step` calls to step() would leave it, in O(1): a resumed run of 10^18 steps does not
  // replay them one by one.
  void jump_to(int64_t step);
  int64_t current_step() const { return step_; }
  double base_lr() const { return base_lr_; }

 protected:
  Optimizer& opt_;
  double base_lr_;
  int64_t step_ = 0;
};

// lr = base * gamma^(floor(step / step_size)), as torch.optim.lr_scheduler.StepLR.
class StepLR : public LrSchedule {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

struct CosineWarmupOptions {
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr = 0.0;
};

// Linear warm-up from base/warmup_steps to base, then cosine decay to min_lr at total_steps.
class CosineWarmup : public LrSchedule {
 public:
  CosineWarmup(Optimizer& opt, CosineWarmupOptions o);
  double lr_at(int64_t step) const override;

 private:
  CosineWarmupOptions o_;
};

}  // namespace frugal::optim
