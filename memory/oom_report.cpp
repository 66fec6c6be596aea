#include "memory/oom_report.h"

#include <cstdio>

#include "memory/live_tags.h"

namespace frugal::memory {

std::string oom_report(Device device) {
  std::string out;
  std::vector<LiveTags::Entry> largest;
  if (LiveTags::largest_on(device, 8, &largest)) {
    out += "\n  largest live allocations by tag (module path/op, category):";
    for (const LiveTags::Entry& e : largest) {
      char line[96];
      std::snprintf(line, sizeof line, "\n    %10.1f MiB in %5lld allocations  ",
                    static_cast<double>(e.bytes) / 1048576.0, static_cast<long long>(e.count));
      out += line + e.tag;
    }
  } else {
    out +=
        "\n  (live allocations by tag are listed while a train::MemoryMonitor or a "
        "memory::LiveTags observes the device)";
  }
  out +=
      "\n  try: --precision f16 or bf16 (autocast halves activations), --checkpoint blocks, "
      "a smaller --batch, --memory-budget SIZE (frugal chooses the cheapest way to fit), "
      "or --oom-recover (retries the step as micro-batches)";
  return out;
}

}  // namespace frugal::memory
