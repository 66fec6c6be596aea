#include "train/memory_monitor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "memory/allocator.h"
#include "memory/host_rss.h"
#include "train/svg_chart.h"

namespace frugal::train {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

void write_text(const std::string& path, const std::string& text, const char* what) {
  std::ofstream f(path, std::ios::binary);
  FRUGAL_CHECK(f.good(), "MemoryMonitor: cannot open ", path, " to write the ", what);
  f << text;
  FRUGAL_CHECK(f.good(), "MemoryMonitor: writing the ", what, " to ", path, " failed");
}

const char* phase_color(memory::Phase p) {
  switch (p) {
    case memory::Phase::forward:
      return "#2ca02c";
    case memory::Phase::backward:
      return "#d62728";
    case memory::Phase::optimizer:
      return "#9467bd";
    case memory::Phase::outside:
      break;
  }
  return "#7f7f7f";
}

}  // namespace

std::string MemoryGrowth::str() const {
  char head[256];
  std::snprintf(head, sizeof head,
                "allocated memory keeps growing: %.1f MiB at the end of step %lld against at most "
                "%.1f MiB at the ends of steps %lld-%lld (+%.1f MiB)",
                mib(allocated), static_cast<long long>(at_step), mib(baseline),
                static_cast<long long>(history_first), static_cast<long long>(history_last),
                mib(allocated - baseline));
  std::string out = head;
  if (!grown_tags.empty()) out += "; grown by tag:";
  for (const auto& [tag, bytes] : grown_tags) {
    char line[64];
    std::snprintf(line, sizeof line, " +%.1f MiB ", mib(bytes));
    out += line + tag + ";";
  }
  out += " (a tensor kept from every step, such as a loss stored with its graph?)";
  return out;
}

MemoryMonitor::MemoryMonitor(Device device, MemoryMonitorOptions options)
    : device_(device), options_(std::move(options)), live_(device), t0_(now_seconds()) {
  memory::add_allocation_observer(this);
}

MemoryMonitor::~MemoryMonitor() { memory::remove_allocation_observer(this); }

void MemoryMonitor::attach(StepCallbacks& callbacks) {
  callbacks.add_all([this](const StepInfo& info) { record(info); });
}

void MemoryMonitor::on_event(const memory::AllocationEvent& e) {
  if (e.device != device_ || !(e.is_alloc() || e.is_free())) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_step_) return;
  // Counted bytes, not requested ones: the base is the allocator's allocated bytes.
  const auto n = static_cast<int64_t>(e.counted);
  step_delta_ += e.is_alloc() ? n : -n;
  step_peak_ = std::max(step_peak_, step_base_ + step_delta_);
  if (profiling_) {
    profile_.push_back({(now_seconds() - profile_start_) * 1e3, step_base_ + step_delta_});
  }
}

void MemoryMonitor::record(const StepInfo& info) {
  const memory::MemoryStats st = memory::allocator_for(device_).stats();
  MemorySample s;
  s.epoch = info.epoch, s.step = info.step, s.global_step = info.global_step;
  s.point = info.point;
  s.seconds = now_seconds() - t0_;
  s.allocated = st.allocated_bytes.current;
  s.reserved = st.reserved_bytes.current;
  if (options_.device_used) s.device_used = options_.device_used();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (info.point == StepPoint::step_begin) {
      in_step_ = true;
      step_base_ = s.allocated, step_delta_ = 0, step_peak_ = s.allocated;
      profiling_ = info.global_step == options_.profile_step;
      if (profiling_) {
        profile_.clear();
        profile_start_ = now_seconds();
        profile_.push_back({0.0, s.allocated});
      }
    } else if (info.point == StepPoint::step_end) {
      // A step replayed from a graph has no step_begin: its peak is unknown.
      s.step_peak = in_step_ ? std::max(step_peak_, s.allocated) : -1;
      s.host_rss = memory::host_rss_bytes();
      in_step_ = false;
      if (profiling_) profile_.push_back({(now_seconds() - profile_start_) * 1e3, s.allocated});
      profiling_ = false;
    }
  }
  samples_.push_back(s);
  if (info.point == StepPoint::step_end) check_growth(s);
}

void MemoryMonitor::check_growth(const MemorySample& s) {
  const int64_t first = options_.warmup_steps, last = first + options_.history_steps - 1;
  if (s.global_step < first) return;
  if (s.global_step <= last) {
    baseline_ = std::max(baseline_, s.allocated);
    if (s.global_step == last) baseline_tags_ = live_.bytes_by_tag();
    return;
  }
  if (growth_ || baseline_ < 0) return;
  // A run of step ends above the baseline, each higher than the one before; one that is above
  // but not higher starts a new run.
  const bool over = s.allocated > baseline_ + options_.tolerance_bytes;
  const bool higher = above_ > 0 && s.allocated > last_above_;
  above_ = over ? (higher ? above_ + 1 : 1) : 0;
  last_above_ = s.allocated;
  if (above_ < options_.growth_steps) return;
  MemoryGrowth g;
  g.baseline = baseline_, g.allocated = s.allocated;
  g.history_first = first, g.history_last = last, g.at_step = s.global_step;
  for (const auto& [tag, bytes] : live_.bytes_by_tag()) {
    auto it = baseline_tags_.find(tag);
    const int64_t grown = bytes - (it == baseline_tags_.end() ? 0 : it->second);
    if (grown > 0) g.grown_tags.emplace_back(tag, grown);
  }
  std::sort(g.grown_tags.begin(), g.grown_tags.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  if (g.grown_tags.size() > 5) g.grown_tags.resize(5);
  growth_ = g;
  const std::string msg = "frugal: memory monitor: " + g.str();
  if (options_.warn) {
    options_.warn(msg);
  } else {
    std::fprintf(stderr, "%s\n", msg.c_str());
  }
}

std::string MemoryMonitor::csv() const {
  std::string out =
      "epoch,step,global_step,point,seconds,allocated_bytes,reserved_bytes,device_used_bytes,"
      "step_peak_bytes,host_rss_bytes\n";
  for (const MemorySample& s : samples_) {
    char line[256];
    std::snprintf(line, sizeof line, "%lld,%lld,%lld,%s,%.6f,%lld,%lld,%s,%s,%s\n",
                  static_cast<long long>(s.epoch), static_cast<long long>(s.step),
                  static_cast<long long>(s.global_step), step_point_name(s.point), s.seconds,
                  static_cast<long long>(s.allocated), static_cast<long long>(s.reserved),
                  s.device_used < 0 ? "" : std::to_string(s.device_used).c_str(),
                  s.step_peak < 0 ? "" : std::to_string(s.step_peak).c_str(),
                  s.host_rss < 0 ? "" : std::to_string(s.host_rss).c_str());
    out += line;
  }
  return out;
}

std::string MemoryMonitor::json() const {
  nlohmann::json j;
  j["device"] = device_.str();
  nlohmann::json samples = nlohmann::json::array();
  for (const MemorySample& s : samples_) {
    nlohmann::json o = {{"epoch", s.epoch},
                        {"step", s.step},
                        {"global_step", s.global_step},
                        {"point", step_point_name(s.point)},
                        {"seconds", s.seconds},
                        {"allocated_bytes", s.allocated},
                        {"reserved_bytes", s.reserved}};
    if (s.device_used >= 0) o["device_used_bytes"] = s.device_used;
    if (s.step_peak >= 0) o["step_peak_bytes"] = s.step_peak;
    if (s.host_rss >= 0) o["host_rss_bytes"] = s.host_rss;
    samples.push_back(std::move(o));
  }
  j["samples"] = std::move(samples);
  if (growth_) {
    nlohmann::json tags = nlohmann::json::array();
    for (const auto& [tag, bytes] : growth_->grown_tags) {
      tags.push_back({{"tag", tag}, {"bytes", bytes}});
    }
    j["growth"] = {{"baseline_bytes", growth_->baseline},
                   {"allocated_bytes", growth_->allocated},
                   {"at_step", growth_->at_step},
                   {"grown_tags", tags},
                   {"message", growth_->str()}};
  } else {
    j["growth"] = nullptr;
  }
  return j.dump(1) + "\n";
}

std::string MemoryMonitor::step_svg() const {
  Chart c;
  c.title = "frugal: allocated memory over step " + std::to_string(options_.profile_step) + " on " +
            device_.str();
  c.x_label = "milliseconds since the step began";
  c.y_label = "MiB";
  std::vector<ProfilePoint> profile;
  {
    std::lock_guard<std::mutex> lock(mu_);
    profile = profile_;
  }
  ChartSeries alloc{"allocated", "#1f77b4", {}, true};
  for (const ProfilePoint& p : profile) alloc.points.emplace_back(p.ms, mib(p.allocated));
  // Reserved and the driver's view at the step's points, on the same time axis, and the phases
  // as bands between the points that end them (forward ends at after_forward, and so on).
  ChartSeries reserved{"reserved", "#ff7f0e", {}, true},
      used{"device used (NVML)", "#8c564b", {}, true};
  double begin = -1, last_ms = 0;
  for (const MemorySample& s : samples_) {
    if (s.global_step != options_.profile_step || s.point == StepPoint::epoch_end) continue;
    if (s.point == StepPoint::step_begin) begin = s.seconds;
    if (begin < 0) continue;
    const double ms = (s.seconds - begin) * 1e3;
    reserved.points.emplace_back(ms, mib(s.reserved));
    if (s.device_used >= 0) used.points.emplace_back(ms, mib(s.device_used));
    memory::Phase ended = memory::Phase::outside;
    if (s.point == StepPoint::after_forward) ended = memory::Phase::forward;
    if (s.point == StepPoint::after_backward) ended = memory::Phase::backward;
    if (s.point == StepPoint::after_optimizer) ended = memory::Phase::optimizer;
    if (ended != memory::Phase::outside) {
      c.bands.push_back({last_ms, ms, memory::phase_name(ended), phase_color(ended)});
    }
    last_ms = ms;
  }
  c.series = {alloc, reserved, used};
  return render_svg(c);
}

std::string MemoryMonitor::run_svg() const {
  Chart c;
  c.title = "frugal: memory at each step's end on " + device_.str();
  c.x_label = "step";
  c.y_label = "MiB";
  ChartSeries alloc{"allocated", "#1f77b4", {}}, peak{"step peak allocated", "#2ca02c", {}},
      reserved{"reserved", "#ff7f0e", {}}, used{"device used (NVML)", "#8c564b", {}};
  // Epochs as bands of alternating colour, each from its first step's end to the next epoch's.
  int64_t epoch = -1;
  double epoch_start = 0, last_x = 0;
  auto close_epoch = [&](double end) {
    if (epoch < 0) return;
    c.bands.push_back({epoch_start, end, "epoch " + std::to_string(epoch + 1),
                       c.bands.size() % 2 == 0 ? "#7f7f7f" : "#17becf"});
  };
  for (const MemorySample& s : samples_) {
    if (s.point != StepPoint::step_end) continue;
    const auto x = static_cast<double>(s.global_step);
    last_x = x;
    if (s.epoch != epoch) {
      close_epoch(x);
      epoch = s.epoch, epoch_start = x;
    }
    alloc.points.emplace_back(x, mib(s.allocated));
    reserved.points.emplace_back(x, mib(s.reserved));
    if (s.step_peak >= 0) peak.points.emplace_back(x, mib(s.step_peak));
    if (s.device_used >= 0) used.points.emplace_back(x, mib(s.device_used));
  }
  close_epoch(last_x + 1);
  c.series = {peak, alloc, reserved, used};
  return render_svg(c);
}

void MemoryMonitor::write_csv(const std::string& path) const { write_text(path, csv(), "CSV"); }
void MemoryMonitor::write_json(const std::string& path) const { write_text(path, json(), "JSON"); }
void MemoryMonitor::write_step_svg(const std::string& path) const {
  write_text(path, step_svg(), "step SVG");
}
void MemoryMonitor::write_run_svg(const std::string& path) const {
  write_text(path, run_svg(), "run SVG");
}

}  // namespace frugal::train
