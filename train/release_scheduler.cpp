#include "train/release_scheduler.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "memory/caching_allocator.h"

namespace frugal::train {
namespace {

double mib(int64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

// The device's total bytes: the CUDA driver's figure for a caching allocator, the host's
// physical memory otherwise.
int64_t device_total(memory::Allocator& allocator) {
  if (auto* caching = dynamic_cast<memory::CachingAllocator*>(&allocator)) {
    return static_cast<int64_t>(caching->source().total_bytes());
  }
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

ReleasePolicy ReleasePolicy::parse(const std::string& text) {
  ReleasePolicy p;
  if (text == "off") return p;
  if (text == "epoch") {
    p.kind = Kind::epoch;
    return p;
  }
  if (text == "adaptive") {
    p.kind = Kind::adaptive;
    return p;
  }
  if (text == "threshold" || text.rfind("threshold:", 0) == 0) {
    p.kind = Kind::threshold;
    if (text.size() > 10) {
      size_t used = 0;
      double f = 0;
      try {
        f = std::stod(text.substr(10), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      FRUGAL_CHECK(used == text.size() - 10 && f > 0 && f <= 1,
                   "release: expected threshold:F with F in (0, 1], got '", text, "'");
      p.fraction = f;
    }
    return p;
  }
  FRUGAL_FAIL("release: expected off, epoch, threshold[:F] or adaptive, got '", text, "'");
}

std::string ReleasePolicy::str() const {
  switch (kind) {
    case Kind::off:
      return "off";
    case Kind::epoch:
      return "epoch";
    case Kind::threshold: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "threshold:%g", fraction);
      return buf;
    }
    case Kind::adaptive:
      return "adaptive";
  }
  return "?";
}

ReleaseScheduler::ReleaseScheduler(memory::Allocator& allocator, ReleasePolicy policy,
                                   std::function<int64_t()> capacity,
                                   std::function<void(const std::string&)> log)
    : allocator_(allocator), policy_(policy), capacity_(std::move(capacity)), log_(std::move(log)) {
  // What parse() guarantees, for policies set field by field.
  FRUGAL_CHECK(policy_.fraction > 0 && policy_.fraction <= 1,
               "ReleaseScheduler: fraction must be in (0, 1], got ", policy_.fraction);
  FRUGAL_CHECK(policy_.cooldown_steps >= 0, "ReleaseScheduler: cooldown_steps must be >= 0, got ",
               policy_.cooldown_steps);
  FRUGAL_CHECK(policy_.window_steps >= 1, "ReleaseScheduler: window_steps must be >= 1, got ",
               policy_.window_steps);
  FRUGAL_CHECK(policy_.margin >= 0, "ReleaseScheduler: margin must be >= 0, got ", policy_.margin);
}

void ReleaseScheduler::attach(StepCallbacks& callbacks) {
  for (StepPoint p : {StepPoint::step_begin, StepPoint::step_end, StepPoint::epoch_end}) {
    callbacks.add(p, [this](const StepInfo& info) { on_point(info); });
  }
}

int64_t ReleaseScheduler::released_bytes() const {
  int64_t total = 0;
  for (const ReleaseRecord& r : releases_) total += r.bytes;
  return total;
}

bool ReleaseScheduler::safe_now() const {
  if (memory::current_phase() != memory::Phase::outside) return false;
  auto* caching = dynamic_cast<memory::CachingAllocator*>(&allocator_);
  return caching == nullptr || !caching->capturing();
}

void ReleaseScheduler::on_point(const StepInfo& info) {
  if (policy_.kind == ReleasePolicy::Kind::off) return;
  const memory::MemoryStats st = allocator_.stats();
  if (info.point == StepPoint::step_begin) {
    if (policy_.kind == ReleasePolicy::Kind::adaptive) {
      step_peak_.emplace(allocator_.device(), st.allocated_bytes.current);
      step_first_allocation_ = st.allocation.allocated + 1;
    }
    return;
  }
  if (info.point != StepPoint::step_end && info.point != StepPoint::epoch_end) return;
  if (!safe_now()) {
    ++refused_unsafe_;
    return;
  }
  const int64_t reserved = st.reserved_bytes.current;
  switch (policy_.kind) {
    case ReleasePolicy::Kind::off:
      return;
    case ReleasePolicy::Kind::epoch:
      if (info.point == StepPoint::epoch_end) release(info, 0, "end of epoch");
      return;
    case ReleasePolicy::Kind::threshold: {
      if (info.point != StepPoint::step_end) return;
      int64_t capacity = static_cast<int64_t>(allocator_.memory_cap_bytes());
      if (capacity == 0) capacity = capacity_ ? capacity_() : device_total(allocator_);
      if (capacity <= 0) return;
      const auto limit = static_cast<int64_t>(policy_.fraction * static_cast<double>(capacity));
      const bool cooling =
          last_release_step_ >= 0 && info.global_step - last_release_step_ < policy_.cooldown_steps;
      if (reserved > limit && !cooling) {
        char why[96];
        std::snprintf(why, sizeof why, "reserved %.1f MiB passed %.0f%% of %.1f MiB", mib(reserved),
                      100.0 * policy_.fraction, mib(capacity));
        release(info, 0, why);
      }
      return;
    }
    case ReleasePolicy::Kind::adaptive: {
      if (info.point != StepPoint::step_end) return;
      if (!step_peak_) return;  // a replayed step: no peak was followed
      const int64_t peak = std::max(step_peak_->peak_bytes(), st.allocated_bytes.current);
      step_peak_.reset();
      window_.push_back({peak, step_first_allocation_});
      while (static_cast<int64_t>(window_.size()) > policy_.window_steps) window_.pop_front();
      int64_t need = 0;
      for (const auto& [p, first] : window_) need = std::max(need, p);
      const auto target = static_cast<int64_t>(static_cast<double>(need) * (1.0 + policy_.margin));
      if (reserved > target && static_cast<int64_t>(window_.size()) == policy_.window_steps) {
        char why[96];
        std::snprintf(why, sizeof why, "above the recent peak %.1f MiB + %.0f%%", mib(need),
                      100.0 * policy_.margin);
        release(info, target, why, window_.front().second);
      }
      return;
    }
  }
}

void ReleaseScheduler::release(const StepInfo& info, int64_t target_reserved,
                               const std::string& reason, int64_t unused_since) {
  const int64_t before = allocator_.stats().reserved_bytes.current;
  auto* caching = dynamic_cast<memory::CachingAllocator*>(&allocator_);
  if (caching != nullptr && target_reserved > 0) {
    caching->trim_cache(static_cast<size_t>(target_reserved), unused_since);
  } else {
    allocator_.empty_cache();
  }
  const int64_t after = allocator_.stats().reserved_bytes.current;
  last_release_step_ = info.global_step;
  if (before == after) return;  // nothing was cached
  releases_.push_back({info.global_step, info.point, before - after, before, after, reason});
  char line[256];
  std::snprintf(line, sizeof line,
                "frugal: released %.1f MiB of cached memory after step %lld (%s): reserved %.1f "
                "-> %.1f MiB",
                mib(before - after), static_cast<long long>(info.global_step), reason.c_str(),
                mib(before), mib(after));
  if (log_) {
    log_(line);
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
}

}  // namespace frugal::train
