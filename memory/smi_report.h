// What `frugal smi` prints, as a pure function of what it gathered (NVML's devices and processes,
// the statistics frugal processes publish), so that the table is tested without a GPU.
//
//   memory::SmiSnapshot snap{.devices = nvml.devices(), .published = read_published_stats()};
//   std::fputs(memory::format_smi(snap).c_str(), stdout);
#pragma once

#include <string>
#include <vector>

#include "memory/nvml.h"
#include "memory/published_stats.h"

namespace frugal::memory {

struct SmiSnapshot {
  std::string nvml_missing;  // why NVML is not available; "" when it is
  std::vector<GpuDeviceInfo> devices;
  std::vector<GpuProcessInfo> processes;  // of every device
  std::vector<PublishedStats> published;  // of live frugal processes
  double now = 0;                         // seconds since the Unix epoch, for the stats' age
};

// A devices table (index, name, total, used, free, utilisation) and a processes table: NVML's
// processes with the memory the driver charges them and, for a frugal process (same pid, same
// cuda:N), its allocated and reserved bytes and their peaks, step and the age of those numbers;
// then the frugal processes NVML does not list (CPU runs, or pids from another namespace).
// Without NVML, a one-line note replaces the devices table. Sizes in MiB, rounded down.
// NVML's device N is shown as cuda:N: the same device when CUDA_DEVICE_ORDER=PCI_BUS_ID or
// there is one GPU.
std::string format_smi(const SmiSnapshot& snapshot);

}  // namespace frugal::memory
