// Chunked parallel loops for reductions: each chunk owns a slot of a partial-sum buffer, so
// threads never share an accumulator and the final sum over chunks is deterministic.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/cpu_common.h"

namespace frugal::kernels::cpu {

// How many chunks a reduction over n items (each about `work` elements) is split into: one per
// thread, fewer when there is too little work to pay for starting them.
inline int64_t chunk_count(int64_t n, int64_t work_per_item, int64_t grain = 32768) {
  if (n <= 0) return 1;
  int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  int64_t by_work = std::max<int64_t>(1, n * std::max<int64_t>(work_per_item, 1) / grain);
  return std::max<int64_t>(1, std::min({threads, n, by_work}));
}

// Calls fn(chunk, begin, end) for `chunks` contiguous slices of [0, n), in parallel.
template <typename Fn>
void for_each_chunk(int64_t n, int64_t chunks, Fn&& fn) {
  if (n <= 0) return;
  if (chunks <= 1) {
    fn(int64_t{0}, int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t t = 0; t < chunks; ++t) fn(t, n * t / chunks, n * (t + 1) / chunks);
}

}  // namespace frugal::kernels::cpu
