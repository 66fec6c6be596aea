// What a user asks of a device's memory at any point: a readable summary, a fresh peak, and the
// cached bytes given back. The same calls answer for every device, the CPU and meta included
// (they cache nothing, so empty_cache gives back 0 there).
//
//   std::puts(memory::summary(Device::cuda(0)).c_str());  // torch.cuda.memory_summary's table
//   memory::reset_peak_stats(Device::cuda(0));             // peaks restart from current
//   int64_t freed = memory::empty_cache(Device::cuda(0));  // reserved drops by exactly `freed`
#pragma once

#include <cstdint>
#include <string>

#include "base/device.h"

namespace frugal::memory {

// The device's statistics as MemoryStats::summary's table, titled with the device.
std::string summary(Device device);
void reset_peak_stats(Device device);
// Returns cached, unused segments to the system; the bytes given back.
int64_t empty_cache(Device device);

}  // namespace frugal::memory
