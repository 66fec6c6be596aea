// Times training steps on the device's own clock: a pair of CUDA events per step on the compute
// stream (the host does not wait between steps, so its work overlaps the device's as it does in
// training), or a steady clock on the CPU. Used by `frugal compare` and bench/train_step_bench.
//
//   StepTimer timer(device, steps);
//   for (int64_t i = 0; i < steps; ++i) { timer.begin(i); step(); timer.end(i); }
//   std::vector<double> ms = timer.milliseconds();  // waits for the device
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "base/device.h"

namespace frugal::train {

class StepTimer {
 public:
  StepTimer(Device device, int64_t steps);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  void begin(int64_t i);  // 0 <= i < steps, each once, in order
  void end(int64_t i);
  // One duration per timed step in milliseconds; on CUDA it first waits for the last event.
  std::vector<double> milliseconds();
  const char* clock_name() const;  // for reports

 private:
  Device device_;
  std::vector<void*> events_;  // cudaEvent_t, [2 * steps] on CUDA
  std::vector<std::chrono::steady_clock::time_point> host_;
  std::vector<double> host_ms_;
};

double median(std::vector<double> v);  // 0 for an empty vector

}  // namespace frugal::train
