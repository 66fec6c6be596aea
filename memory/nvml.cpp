// memory::Nvml: dlopen of libnvidia-ml and the handful of NVML calls frugal needs, declared here
// by hand with the layouts of NVIDIA's nvml.h (CUDA 11 and later) so that nothing links to NVML.
#include "memory/nvml.h"

#include <dlfcn.h>

#include <cstddef>
#include <type_traits>

namespace frugal::memory {

namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;
constexpr unsigned kNameBufferBytes = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
// The layout of nvmlDeviceGetComputeRunningProcesses_v3 (and _v2): 24 bytes, usedGpuMemory at 8.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlProcessInfo_t) == 24 && offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8);

}  // namespace

struct Nvml::Api {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*get_count)(unsigned*) = nullptr;
  nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*get_utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*get_processes)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  bool initialised = false;

  std::string error(nvmlReturn_t rc) const {
    const char* s = error_string != nullptr ? error_string(rc) : nullptr;
    return s != nullptr ? std::string(s) : "NVML error " + std::to_string(rc);
  }
  nvmlDevice_t device(int index) const {
    nvmlDevice_t d = nullptr;
    if (index < 0 || get_handle(static_cast<unsigned>(index), &d) != kNvmlSuccess) return nullptr;
    return d;
  }
};

Nvml::Nvml(std::string library) : library_(std::move(library)) {}

Nvml::~Nvml() {
  if (api_ == nullptr) return;
  if (api_->initialised) api_->shutdown();
  if (api_->handle != nullptr) dlclose(api_->handle);
}

const Nvml::Api* Nvml::api() const {
  std::call_once(opened_, [this] {
    auto api = std::make_unique<Api>();
    api->handle = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api->handle == nullptr) {
      const char* e = dlerror();
      why_not_ =
          library_ + " could not be loaded (no NVIDIA driver?): " + (e ? e : "dlopen failed");
      return;
    }
    api_ = std::move(api);  // from here on the destructor closes the library
    Api& a = *api_;
    std::string missing;
    auto need = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(a.handle, name));
      if (fn == nullptr && missing.empty()) missing = name;
    };
    need(a.init, "nvmlInit_v2");
    need(a.shutdown, "nvmlShutdown");
    need(a.get_count, "nvmlDeviceGetCount_v2");
    need(a.get_handle, "nvmlDeviceGetHandleByIndex_v2");
    need(a.get_name, "nvmlDeviceGetName");
    need(a.get_memory, "nvmlDeviceGetMemoryInfo");
    need(a.get_utilization, "nvmlDeviceGetUtilizationRates");
    need(a.error_string, "nvmlErrorString");
    // _v3 in current drivers, _v2 in older ones (R450 on), both with the 24-byte layout above.
    need(a.get_processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (a.get_processes == nullptr && missing == "nvmlDeviceGetComputeRunningProcesses_v3") {
      missing.clear();
      need(a.get_processes, "nvmlDeviceGetComputeRunningProcesses_v2");
    }
    if (!missing.empty()) {
      why_not_ = library_ + " has no " + missing + " (not NVML, or a driver older than CUDA 11)";
      return;
    }
    if (const nvmlReturn_t rc = a.init(); rc != kNvmlSuccess) {
      why_not_ = "nvmlInit_v2 failed: " + a.error(rc);
      return;
    }
    a.initialised = true;
    unsigned count = 0;
    if (const nvmlReturn_t rc = a.get_count(&count); rc != kNvmlSuccess) {
      why_not_ = "nvmlDeviceGetCount_v2 failed: " + a.error(rc);
    } else if (count == 0) {
      why_not_ = "NVML sees no GPU";
    }
  });
  return why_not_.empty() ? api_.get() : nullptr;
}

bool Nvml::available() const { return api() != nullptr; }

std::string Nvml::why_not() const {
  api();
  return why_not_;
}

int Nvml::device_count() const {
  const Api* a = api();
  unsigned count = 0;
  if (a == nullptr || a->get_count(&count) != kNvmlSuccess) return 0;
  return static_cast<int>(count);
}

std::optional<GpuDeviceInfo> Nvml::device(int index) const {
  const Api* a = api();
  if (a == nullptr) return std::nullopt;
  nvmlDevice_t d = a->device(index);
  if (d == nullptr) return std::nullopt;
  GpuDeviceInfo info;
  info.index = index;
  char name[kNameBufferBytes] = {};
  if (a->get_name(d, name, sizeof name) == kNvmlSuccess) info.name = name;
  nvmlMemory_t mem{};
  if (a->get_memory(d, &mem) != kNvmlSuccess) return std::nullopt;
  info.total_bytes = static_cast<int64_t>(mem.total);
  info.used_bytes = static_cast<int64_t>(mem.used);
  info.free_bytes = static_cast<int64_t>(mem.free);
  // Not supported under MIG, for one: the memory numbers still stand.
  if (nvmlUtilization_t u{}; a->get_utilization(d, &u) == kNvmlSuccess) {
    info.gpu_utilization = static_cast<int>(u.gpu);
    info.memory_utilization = static_cast<int>(u.memory);
  }
  return info;
}

std::vector<GpuDeviceInfo> Nvml::devices() const {
  std::vector<GpuDeviceInfo> out;
  for (int i = 0, n = device_count(); i < n; ++i) {
    if (auto d = device(i)) out.push_back(std::move(*d));
  }
  return out;
}

std::vector<GpuProcessInfo> Nvml::processes(int index) const {
  const Api* a = api();
  if (a == nullptr) return {};
  nvmlDevice_t d = a->device(index);
  if (d == nullptr) return {};
  // Ask for the count, then the list; processes may start in between, hence the slack and the
  // few rounds.
  std::vector<nvmlProcessInfo_t> infos;
  unsigned count = 0;
  nvmlReturn_t rc = a->get_processes(d, &count, nullptr);
  for (int round = 0; round < 4 && rc == kNvmlInsufficientSize; ++round) {
    infos.resize(count + 8);
    count = static_cast<unsigned>(infos.size());
    rc = a->get_processes(d, &count, infos.data());
  }
  if (rc != kNvmlSuccess) return {};
  std::vector<GpuProcessInfo> out;
  for (unsigned i = 0; i < count && i < infos.size(); ++i) {
    const nvmlProcessInfo_t& p = infos[i];
    out.push_back(
        {index, static_cast<int64_t>(p.pid),
         p.usedGpuMemory == kNvmlValueNotAvailable ? -1 : static_cast<int64_t>(p.usedGpuMemory)});
  }
  return out;
}

std::optional<int64_t> Nvml::process_used_bytes(int index, int64_t pid) const {
  for (const GpuProcessInfo& p : processes(index)) {
    if (p.pid == pid && p.used_bytes >= 0) return p.used_bytes;
  }
  return std::nullopt;
}

}  // namespace frugal::memory
