// The leak check: allocations made inside a scope and alive at its end (leak_check.h).
#include "memory/leak_check.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "base/error.h"

namespace frugal::memory {
namespace {

// "512 B", "33.4 KiB", "1.2 MiB": leaks range from a 4-byte loss to whole activations.
std::string human(size_t bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  if (bytes < 1024) {
    os << bytes << " B";
  } else if (bytes < 1024 * 1024) {
    os << static_cast<double>(bytes) / 1024.0 << " KiB";
  } else {
    os << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  }
  return os.str();
}

}  // namespace

LeakCheck::LeakCheck(Options opts) : opts_(opts) { add_allocation_observer(this); }

LeakCheck::~LeakCheck() {
  if (opts_.at_end == LeakAction::throw_error) opts_.at_end = LeakAction::warn;
  try {
    finish();
  } catch (const std::exception& e) {  // a report that cannot be built must not end the program
    std::fprintf(stderr, "frugal: LeakCheck: %s\n", e.what());
  }
}

void LeakCheck::on_event(const AllocationEvent& e) {
  if (opts_.device && e.device != *opts_.device) return;
  if (!e.is_alloc() && !e.is_free()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!observing_) return;
  if (e.is_alloc()) {
    live_.emplace(e.id, Live{e.bytes, e.tag, e.device});
  } else if (e.id != 0) {
    live_.erase(e.id);
  }
}

void LeakCheck::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!observing_) return;
    observing_ = false;
  }
  remove_allocation_observer(this);
}

void LeakCheck::finish() {
  stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (acted_) return;
    acted_ = true;
  }
  if (opts_.at_end == LeakAction::collect) return;
  const std::string text = report();
  if (text.empty()) return;
  if (opts_.at_end == LeakAction::throw_error) throw Error(text);
  std::fprintf(stderr, "frugal: %s", text.c_str());
}

std::vector<Leak> LeakCheck::leaks() const {
  std::map<std::tuple<const AllocationTag*, DeviceType, int>, Leak> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, a] : live_) {
      Leak& l = groups[{a.tag, a.device.type, a.device.index}];
      l.tag = a.tag;
      l.device = a.device;
      l.bytes += a.bytes;
      l.count++;
    }
  }
  std::vector<Leak> out;
  out.reserve(groups.size());
  for (auto& [key, l] : groups) {
    l.name = l.tag->name.empty() ? "untagged" : l.tag->name;
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(), [](const Leak& a, const Leak& b) {
    return std::tie(b.bytes, b.count, a.name) < std::tie(a.bytes, a.count, b.name);
  });
  return out;
}

std::string LeakCheck::report() const {
  const std::vector<Leak> ls = leaks();
  if (ls.empty()) return "";
  size_t bytes = 0;
  int64_t count = 0;
  for (const Leak& l : ls) {
    bytes += l.bytes;
    count += l.count;
  }
  std::ostringstream os;
  os << "LeakCheck: " << count << " allocation" << (count == 1 ? "" : "s") << " (" << human(bytes)
     << ") made inside the check " << (count == 1 ? "is" : "are") << " still alive:\n";
  for (const Leak& l : ls) {
    os << "  " << human(l.bytes) << " in " << l.count << " allocation" << (l.count == 1 ? "" : "s")
       << " on " << l.device.str() << ": " << l.name << " (" << phase_name(l.tag->phase) << ")\n";
  }
  return os.str();
}

}  // namespace frugal::memory
