// NVIDIA's management library (NVML), loaded at run time with dlopen: what the driver sees of each
// GPU (memory, utilisation, the processes holding memory), which frugal's own statistics cannot
// (other processes, the CUDA context, library workspaces outside the allocator). There is no link
// dependency and no NVML header: the few calls used are declared by hand in nvml.cpp. Without the
// library, the driver or a GPU, available() is false, why_not() says which, and every query
// answers empty; nothing on that path throws.
//
//   memory::Nvml nvml;  // opened on first use
//   if (!nvml.available()) std::printf("no NVML: %s\n", nvml.why_not().c_str());
//   for (const memory::GpuDeviceInfo& d : nvml.devices()) ...
//   std::optional<int64_t> mine = nvml.process_used_bytes(0, getpid());
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace frugal::memory {

struct GpuDeviceInfo {
  int index = 0;
  std::string name;
  int64_t total_bytes = 0;
  int64_t used_bytes = 0;
  int64_t free_bytes = 0;
  int gpu_utilization = -1;     // % of the last sample period a kernel ran; -1 unknown (MIG)
  int memory_utilization = -1;  // % of it the memory was read or written; -1 unknown
};

struct GpuProcessInfo {
  int device = 0;
  int64_t pid = 0;          // as the driver sees it: the host's pid inside a container
  int64_t used_bytes = -1;  // -1 when NVML cannot tell (no permission)
};

class Nvml {
 public:
  static constexpr const char* kLibrary = "libnvidia-ml.so.1";

  // `library`: the soname or path to dlopen (tests point it elsewhere). Nothing is opened yet.
  explicit Nvml(std::string library = kLibrary);
  ~Nvml();  // shuts NVML down and closes the library, if it opened them
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool available() const;
  std::string why_not() const;  // "" when available
  int device_count() const;     // 0 when not available
  std::optional<GpuDeviceInfo> device(int index) const;
  std::vector<GpuDeviceInfo> devices() const;
  // Processes with a compute context on device `index` and the memory the driver charges them.
  std::vector<GpuProcessInfo> processes(int index) const;
  // What device `index` charges process `pid`; nullopt when it is not listed or NVML cannot tell.
  std::optional<int64_t> process_used_bytes(int index, int64_t pid) const;

 private:
  struct Api;
  const Api* api() const;  // opens on first use; null when not available

  std::string library_;
  mutable std::once_flag opened_;
  mutable std::unique_ptr<Api> api_;
  mutable std::string why_not_;
};

}  // namespace frugal::memory
