// The `frugal smi` tables (memory/smi_report.h).
#include "memory/smi_report.h"

#include <cstdio>
#include <set>

namespace frugal::memory {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

std::string mib(int64_t bytes) { return bytes < 0 ? "-" : std::to_string(bytes / kMiB) + " MiB"; }

std::string percent(int p) { return p < 0 ? "-" : std::to_string(p) + "%"; }

std::string line(const char* format, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// device, pid, program, used (NVML), allocated, its peak, reserved, its peak, step, age
constexpr const char* kProcessRow = "%-7s %8s  %-16.16s %10s %10s %10s %10s %10s %8s %7s\n";

// One process row; `nvml` null for a frugal process NVML does not list, `stats` null for a
// process that publishes nothing.
std::string process_row(const std::string& device, int64_t pid, const GpuProcessInfo* nvml,
                        const PublishedStats* stats, double now) {
  const std::string used = nvml != nullptr ? mib(nvml->used_bytes) : "-";
  if (stats == nullptr) {
    return line(kProcessRow, device.c_str(), std::to_string(pid).c_str(), "-", used.c_str(), "-",
                "-", "-", "-", "-", "-");
  }
  const std::string age = line("%.1fs", now > stats->time ? now - stats->time : 0.0);
  return line(kProcessRow, device.c_str(), std::to_string(pid).c_str(), stats->program.c_str(),
              used.c_str(), mib(stats->allocated).c_str(), mib(stats->allocated_peak).c_str(),
              mib(stats->reserved).c_str(), mib(stats->reserved_peak).c_str(),
              std::to_string(stats->step).c_str(), age.c_str());
}

}  // namespace

std::string format_smi(const SmiSnapshot& snap) {
  std::string out;
  if (!snap.nvml_missing.empty()) {
    out += "NVML not available: " + snap.nvml_missing + "\n";
  } else {
    out += line("%-7s %-24s %11s %11s %11s %5s %5s\n", "device", "name", "total", "used", "free",
                "util", "mem");
    for (const GpuDeviceInfo& d : snap.devices) {
      out += line("cuda:%-2d %-24.24s %11s %11s %11s %5s %5s\n", d.index, d.name.c_str(),
                  mib(d.total_bytes).c_str(), mib(d.used_bytes).c_str(), mib(d.free_bytes).c_str(),
                  percent(d.gpu_utilization).c_str(), percent(d.memory_utilization).c_str());
    }
  }
  if (snap.processes.empty() && snap.published.empty()) {
    if (snap.nvml_missing.empty()) out += "\nno processes\n";
    return out;
  }
  out += '\n';
  out += line(kProcessRow, "device", "pid", "program", "used", "allocated", "alloc peak",
              "reserved", "resv peak", "step", "age");
  std::set<const PublishedStats*> shown;
  for (const GpuProcessInfo& p : snap.processes) {
    const PublishedStats* stats = nullptr;
    for (const PublishedStats& s : snap.published) {
      if (s.pid == p.pid && s.device == "cuda:" + std::to_string(p.device)) stats = &s;
    }
    if (stats != nullptr) shown.insert(stats);
    out += process_row("cuda:" + std::to_string(p.device), p.pid, &p, stats, snap.now);
  }
  for (const PublishedStats& s : snap.published) {
    if (shown.count(&s) == 0) out += process_row(s.device, s.pid, nullptr, &s, snap.now);
  }
  return out;
}

}  // namespace frugal::memory
