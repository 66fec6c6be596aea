// The one rounding rule of device requests, shared by the caching allocator (which hands out
// blocks of this size) and the step planner (whose arena entries must match those blocks).
#pragma once

#include <cstddef>

namespace frugal::memory {

constexpr size_t kRoundBytes = 512;

// Bytes a request occupies (>= 512, a multiple of 512).
constexpr size_t round_request(size_t bytes) {
  return bytes < kRoundBytes ? kRoundBytes : (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}

}  // namespace frugal::memory
