#include "train/step_callbacks.h"

namespace frugal::train {

const char* step_point_name(StepPoint p) {
  switch (p) {
    case StepPoint::step_begin:
      return "step_begin";
    case StepPoint::after_forward:
      return "after_forward";
    case StepPoint::after_backward:
      return "after_backward";
    case StepPoint::after_optimizer:
      return "after_optimizer";
    case StepPoint::step_end:
      return "step_end";
    case StepPoint::epoch_end:
      return "epoch_end";
  }
  return "?";
}

void StepCallbacks::add(StepPoint point, StepCallback fn) {
  at_[static_cast<size_t>(point)].push_back(std::move(fn));
}

void StepCallbacks::add_all(const StepCallback& fn) {
  for (auto& list : at_) list.push_back(fn);
}

bool StepCallbacks::empty() const {
  for (const auto& list : at_) {
    if (!list.empty()) return false;
  }
  return true;
}

void StepCallbacks::set_position(int64_t epoch, int64_t step, Device device) {
  epoch_ = epoch, step_ = step, device_ = device;
}

void StepCallbacks::fire(StepPoint point, const Tensor& loss, int64_t micro_batch) const {
  StepInfo info{point, epoch_, step_, steps_finished_, micro_batch, device_, loss};
  for (const StepCallback& fn : at_[static_cast<size_t>(point)]) fn(info);
  if (point == StepPoint::step_end) ++steps_finished_;
}

}  // namespace frugal::train
