// SegmentCounter (segment_counter.h): every count under one lock.
#include "memory/segment_counter.h"

namespace frugal::memory {

bool SegmentCounter::add(size_t bytes, size_t cap) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cap != 0 && static_cast<size_t>(stats_.reserved_bytes.current) + bytes > cap) {
    stats_.num_ooms++;
    return false;
  }
  const auto n = static_cast<int64_t>(bytes);
  for (Stat* s : {&stats_.allocated_bytes, &stats_.requested_bytes, &stats_.reserved_bytes,
                  &stats_.active_bytes}) {
    s->add(n);
  }
  stats_.allocation.add(1);
  stats_.segment.add(1);
  return true;
}

void SegmentCounter::remove(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto n = static_cast<int64_t>(bytes);
  for (Stat* s : {&stats_.allocated_bytes, &stats_.requested_bytes, &stats_.reserved_bytes,
                  &stats_.active_bytes}) {
    s->sub(n);
  }
  stats_.allocation.sub(1);
  stats_.segment.sub(1);
}

void SegmentCounter::count_oom() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_ooms++;
}

MemoryStats SegmentCounter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void SegmentCounter::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.reset_peaks();
}

}  // namespace frugal::memory
