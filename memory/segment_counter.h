// The statistics of an allocator whose every allocation is a segment of its own (allocated ==
// requested == reserved == active): the CPU, meta and pinned host allocators keep one each.
#pragma once

#include <cstddef>
#include <mutex>

#include "memory/allocator.h"

namespace frugal::memory {

// Thread-safe; one lock for a cap's check and the count, so two threads cannot both pass a cap.
class SegmentCounter {
 public:
  // Counts `bytes` as one more allocation unless they would take reserved bytes past `cap`
  // (0: no cap); then counts an OOM instead and returns false.
  bool add(size_t bytes, size_t cap = 0);
  void remove(size_t bytes);
  void count_oom();
  MemoryStats stats() const;
  void reset_peaks();

 private:
  mutable std::mutex mu_;
  MemoryStats stats_;
};

}  // namespace frugal::memory
