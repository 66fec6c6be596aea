// What an out-of-memory error says beyond the failed request (every allocator's message ends
// with it): the largest live allocations by tag when a memory::LiveTags observes the device (the
// memory monitor and `frugal train` keep one), and what to try.
#pragma once

#include <string>

#include "base/device.h"

namespace frugal::memory {

// Lines starting with "\n  ". Must not call into the failing allocator (it holds its lock).
std::string oom_report(Device device);

}  // namespace frugal::memory
