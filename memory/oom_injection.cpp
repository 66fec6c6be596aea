#include "memory/oom_injection.h"

#include <atomic>
#include <mutex>

#include "base/error.h"
#include "memory/events.h"
#include "memory/oom_report.h"

namespace frugal::memory {
namespace {

struct Injection {
  std::atomic<bool> armed{false};
  std::mutex mu;
  Device device;
  int64_t nth = 0;
  int64_t seen = 0;
  bool fired = false;
};

Injection& injection() {
  static Injection i;
  return i;
}

}  // namespace

InjectOom::InjectOom(Device device, int64_t nth) {
  FRUGAL_CHECK(nth >= 0, "InjectOom: allocation index must be >= 0, got ", nth);
  Injection& in = injection();
  std::lock_guard<std::mutex> lock(in.mu);
  FRUGAL_CHECK(!in.armed.load(), "InjectOom: one at a time");
  in.device = device, in.nth = nth, in.seen = 0, in.fired = false;
  in.armed.store(true);
}

InjectOom::~InjectOom() { injection().armed.store(false); }

int64_t InjectOom::seen() const {
  std::lock_guard<std::mutex> lock(injection().mu);
  return injection().seen;
}

bool InjectOom::fired() const {
  std::lock_guard<std::mutex> lock(injection().mu);
  return injection().fired;
}

namespace detail {

void check_injected_oom(Device device, size_t bytes) {
  Injection& in = injection();
  if (!in.armed.load(std::memory_order_relaxed)) return;
  int64_t index = 0;
  {
    std::lock_guard<std::mutex> lock(in.mu);
    if (!in.armed.load() || in.device != device || in.fired) return;
    index = in.seen++;
    if (index != in.nth) return;
    in.fired = true;
  }
  notify_memory_event(EventKind::oom, device, bytes);  // Note [Allocation events]
  throw OutOfMemoryError(frugal::detail::str(
      device.str(), " out of memory (injected by memory::InjectOom at ", "allocation ", index,
      "): tried to allocate ", bytes, " bytes", oom_report(device)));
}

}  // namespace detail
}  // namespace frugal::memory
