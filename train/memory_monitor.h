// The memory monitor: what people hand-write around PyTorch as callbacks that log
// memory_allocated() and memory_reserved() at points of the step, built in. It records the
// device allocator's allocated and reserved bytes, and the device's used memory as the driver
// sees it (NVML: the difference is the CUDA context and the libraries), at every step point, and
// the process's resident host memory at every step's end;
// writes them as CSV or JSON; draws one step's allocations over time with its phases marked and
// the whole run step by step (SVG); and flags allocated memory that keeps growing.
//
//   train::StepCallbacks cb;
//   train::MemoryMonitor monitor(device, {.device_used = [] { return nvml_used_bytes(); }});
//   monitor.attach(cb);
//   train::train_epoch(model, opt, nullptr, loader, 0, {.callbacks = &cb});
//   monitor.write_csv("run.csv"); monitor.write_step_svg("step.svg"); monitor.growth();
//
// Note [Memory growth across steps]
// After the first steps (warmup_steps: optimizer state made lazily, cuDNN's benchmarks, the
// planner's first plan) allocated bytes at a step's end are the same from step to step: weights,
// gradients, optimizer state, nothing of the step itself. The largest of them over history_steps
// steps is the baseline. Allocated bytes above baseline + tolerance at growth_steps step ends in
// a row, each above the one before, is growth: something of every step is kept (a loss stored
// with its graph, say). The monitor keeps live bytes by tag (memory::LiveTags), compares them
// with those at the baseline's last step, and names the tags that grew.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/device.h"
#include "memory/events.h"
#include "memory/live_tags.h"
#include "train/step_callbacks.h"

namespace frugal::train {

struct MemorySample {
  int64_t epoch = 0, step = 0, global_step = 0;
  StepPoint point = StepPoint::step_begin;
  double seconds = 0;  // since the monitor was made
  int64_t allocated = 0, reserved = 0;
  int64_t device_used = -1;  // from MemoryMonitorOptions::device_used; -1 when unknown
  int64_t step_peak = -1;    // at step_end: the largest allocated during the step, as counted
  // At step_end: the process's resident host memory (memory/host_rss.h), -1 elsewhere or when
  // unknown. Once a step, as a file read costs more than the allocator's counters.
  int64_t host_rss = -1;
};

struct MemoryGrowth {
  int64_t baseline = 0;   // the largest allocated at a step end of the history steps
  int64_t allocated = 0;  // at the step end that flagged growth
  int64_t history_first = 0, history_last = 0, at_step = 0;  // global steps
  std::vector<std::pair<std::string, int64_t>> grown_tags;   // tag, bytes grown; largest first
  std::string str() const;
};

struct MemoryMonitorOptions {
  int64_t warmup_steps = 2;   // steps left out of the history
  int64_t history_steps = 3;  // step ends whose largest allocated makes the baseline
  int64_t growth_steps = 3;   // step ends in a row above the baseline, each higher, flag growth
  int64_t tolerance_bytes = int64_t{1} << 20;
  int64_t profile_step = 3;  // the global step write_step_svg draws; -1: none
  // The device's used bytes as the driver reports them (e.g. NVML); null: not recorded.
  std::function<int64_t()> device_used = nullptr;
  // Called once when growth is flagged; null prints to stderr.
  std::function<void(const std::string&)> warn = nullptr;
};

class MemoryMonitor : public memory::AllocationObserver {
 public:
  explicit MemoryMonitor(Device device, MemoryMonitorOptions options = {});
  ~MemoryMonitor() override;
  MemoryMonitor(const MemoryMonitor&) = delete;
  MemoryMonitor& operator=(const MemoryMonitor&) = delete;

  // Records at every point of `callbacks` from now on (the monitor must outlive its use there).
  void attach(StepCallbacks& callbacks);
  void record(const StepInfo& info);
  void on_event(const memory::AllocationEvent& e) override;

  const std::vector<MemorySample>& samples() const { return samples_; }
  const std::optional<MemoryGrowth>& growth() const { return growth_; }
  const memory::LiveTags& live_tags() const { return live_; }

  std::string csv() const;
  std::string json() const;
  std::string step_svg() const;  // the profile step: allocated over time, phases shaded
  std::string run_svg() const;   // per step: allocated and reserved at its end, its peak, NVML
  void write_csv(const std::string& path) const;
  void write_json(const std::string& path) const;
  void write_step_svg(const std::string& path) const;
  void write_run_svg(const std::string& path) const;

 private:
  void check_growth(const MemorySample& s);

  Device device_;
  MemoryMonitorOptions options_;
  memory::LiveTags live_;
  std::vector<MemorySample> samples_;
  std::optional<MemoryGrowth> growth_;
  std::map<std::string, int64_t> baseline_tags_;
  int64_t baseline_ = -1;
  int64_t above_ = 0, last_above_ = 0;
  mutable std::mutex
      mu_;  // guards the step in flight and the profile (events come from any thread)
  // The step in flight: allocated at its start plus the bytes observed since, and its peak.
  int64_t step_base_ = 0, step_delta_ = 0, step_peak_ = 0;
  bool in_step_ = false;
  // The profile step's allocations: (ms since its start, allocated after it).
  struct ProfilePoint {
    double ms;
    int64_t allocated;
  };
  std::vector<ProfilePoint> profile_;
  bool profiling_ = false;
  double profile_start_ = 0;
  double t0_ = 0;
};

}  // namespace frugal::train
