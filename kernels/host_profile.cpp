// Counters of kernels/host_profile.h: one map under a mutex (only touched when enabled).
#include "kernels/host_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace frugal::kernels::host_profile {
namespace {

struct Counter {
  int64_t calls = 0;
  std::chrono::steady_clock::duration total{};
};

struct State {
  std::mutex mu;
  std::map<std::string, Counter> counters;
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  ~State() {
    if (!enabled()) return;
    std::string r = report();
    std::fputs(r.c_str(), stderr);
  }
};

State& state() {
  static State s;
  return s;
}

constexpr const char* kPhasePrefix = "phase ";  // counters that enclose kernel entries

double ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FRUGAL_HOST_PROFILE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

void add(const char* name, std::chrono::steady_clock::duration elapsed) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Counter& c = s.counters[name];
  ++c.calls;
  c.total += elapsed;
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.counters.clear();
  s.since = std::chrono::steady_clock::now();
}

std::string report() {
  if (!enabled()) return {};
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<std::pair<std::string, Counter>> rows(s.counters.begin(), s.counters.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  std::chrono::steady_clock::duration in_kernels{};
  for (const auto& r : rows) {
    if (r.first.rfind(kPhasePrefix, 0) != 0) in_kernels += r.second.total;  // phases nest
  }
  const double wall = ms(std::chrono::steady_clock::now() - s.since);
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "frugal host profile: %.2f ms since reset, %.2f ms inside kernel entries\n", wall,
                ms(in_kernels));
  out += line;
  for (const auto& [name, c] : rows) {
    std::snprintf(line, sizeof line, "%10.3f ms %8lld calls %8.2f us/call  %s\n", ms(c.total),
                  static_cast<long long>(c.calls),
                  1000.0 * ms(c.total) / static_cast<double>(c.calls), name.c_str());
    out += line;
  }
  return out;
}

}  // namespace frugal::kernels::host_profile
