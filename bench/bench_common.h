// Helpers shared by the benchmark programs of bench/: a tiny flag parser, medians, process
// memory from /proc, and the CPU's or GPU's name. Header-only because every bench/*.cpp is its
// own executable.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/step_timer.h"

namespace frugal::bench {

// `--name value`, `--name=value` and boolean `--flag`; an unknown flag is an error.
class Flags {
 public:
  Flags(int argc, char** argv, const std::set<std::string>& valued,
        const std::set<std::string>& switches) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + a + "'");
      std::string name = a.substr(2), value;
      bool has_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      if (switches.count(name) != 0) {
        if (has_value) throw std::invalid_argument("--" + name + " takes no value");
        on_.insert(name);
      } else if (valued.count(name) != 0) {
        if (!has_value) {
          if (i + 1 >= argc) throw std::invalid_argument("--" + name + " needs a value");
          value = argv[++i];
        }
        values_[name] = value;
      } else {
        throw std::invalid_argument("unknown flag --" + name);
      }
    }
  }
  bool flag(const std::string& n) const { return on_.count(n) != 0; }
  std::string str(const std::string& n, const std::string& fallback) const {
    auto it = values_.find(n);
    return it == values_.end() ? fallback : it->second;
  }
  int64_t integer(const std::string& n, int64_t fallback, int64_t min) const {
    auto it = values_.find(n);
    if (it == values_.end()) return fallback;
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != it->second.size() || v < min)
      throw std::invalid_argument("--" + n + " wants an integer >= " + std::to_string(min) +
                                  ", got '" + it->second + "'");
    return v;
  }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> on_;
};

// "3x224x224" -> {3, 224, 224}
inline std::vector<int64_t> parse_chw(const std::string& s) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t x = s.find('x', start);
    std::string part = s.substr(start, x == std::string::npos ? std::string::npos : x - start);
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || v <= 0)
      throw std::invalid_argument("--input wants CxHxW, e.g. 3x224x224, got '" + s + "'");
    out.push_back(v);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  if (out.size() != 3)
    throw std::invalid_argument("--input wants CxHxW, e.g. 3x224x224, got '" + s + "'");
  return out;
}

using train::median;  // train/step_timer.h

// A field of /proc/self/status in bytes ("VmHWM", "VmRSS"); -1 when unreadable.
inline int64_t proc_status_bytes(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// Resets the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0), so that a later
// VmHWM is the peak over what ran in between. Returns false when the kernel refuses.
inline bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// Peak RSS of the whole process life, as resource.getrusage reports it.
inline int64_t max_rss_bytes() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<int64_t>(r.ru_maxrss) * 1024;
}

inline std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

// main() of a benchmark whose every failure is a usage error: runs `run`, and on an exception
// prints "<name>: <what>" and the usage to stderr and returns 2.
inline int main_with_usage(const char* name, const char* usage, int (*run)(int, char**), int argc,
                           char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n" << usage;
    return 2;
  }
}

}  // namespace frugal::bench
