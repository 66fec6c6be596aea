// The process's resident host memory (RSS) as the kernel counts it, for the memory monitor's
// samples and soak runs: host memory that grows step after step is a leak no allocator sees
// (the driver's, a library's, a std::vector kept by mistake).
//
//   int64_t rss = memory::host_rss_bytes();  // -1 where /proc/self/statm cannot be read
#pragma once

#include <cstdint>

namespace frugal::memory {

int64_t host_rss_bytes();

}  // namespace frugal::memory
