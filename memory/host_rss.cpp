// host_rss_bytes from /proc/self/statm: its second field is the resident set in pages.
#include "memory/host_rss.h"

#include <unistd.h>

#include <cstdio>

namespace frugal::memory {

int64_t host_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  if (got != 2 || page <= 0) return -1;
  return static_cast<int64_t>(resident) * page;
}

}  // namespace frugal::memory
