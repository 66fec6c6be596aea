// A stand-in libnvidia-ml.so for memory::Nvml's tests (tests/memory/nvml_test.cpp), built as a
// shared library the tests dlopen by path. Two GPUs; the first runs three compute processes, the
// caller's own among them (pid from getpid), so the list needs the count-then-fill round trip.
// Process records are written at the byte offsets of NVIDIA's nvmlProcessInfo_t (pid at 0,
// usedGpuMemory at 8, 24 bytes each), not through a copy of the reader's struct, so a layout
// mistake in the reader shows. FAKE_NVML_INIT_FAIL and FAKE_NVML_NO_GPU select the failures.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kInsufficientSize = 7,
              kDriverNotLoaded = 9;
constexpr uint64_t kGiB = uint64_t{1} << 30, kMiB = uint64_t{1} << 20;
int g_devices[2];  // their addresses are the handles

int index_of(void* d) {
  for (int i = 0; i < 2; ++i) {
    if (d == &g_devices[i]) return i;
  }
  return -1;
}

void put_process(unsigned char* at, uint32_t pid, uint64_t used) {
  std::memset(at, 0, 24);
  std::memcpy(at, &pid, 4);
  std::memcpy(at + 8, &used, 8);
  const uint32_t no_instance = 0xFFFFFFFFu;  // as without MIG
  std::memcpy(at + 16, &no_instance, 4);
  std::memcpy(at + 20, &no_instance, 4);
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return std::getenv("FAKE_NVML_INIT_FAIL") ? kDriverNotLoaded : kSuccess; }
int nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(int rc) {
  return rc == kDriverNotLoaded ? "Driver Not Loaded" : "Fake NVML error";
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = std::getenv("FAKE_NVML_NO_GPU") ? 0 : 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= 2) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  const char* names[] = {"Fake H200", "Fake A100"};
  const int i = index_of(device);
  if (i < 0) return kInvalidArgument;
  std::strncpy(name, names[i], length);
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* device, uint64_t* memory) {  // total, free, used
  const int i = index_of(device);
  if (i < 0) return kInvalidArgument;
  memory[0] = i == 0 ? 141 * kGiB : 80 * kGiB;
  memory[2] = i == 0 ? 5 * kGiB : 0;
  memory[1] = memory[0] - memory[2];
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* device, unsigned* rates) {  // gpu, memory
  const int i = index_of(device);
  if (i != 0) return i < 0 ? kInvalidArgument : kNotSupported;  // as under MIG
  rates[0] = 87;
  rates[1] = 41;
  return kSuccess;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned* count, unsigned char* infos) {
  const int i = index_of(device);
  if (i < 0) return kInvalidArgument;
  const unsigned n = i == 0 ? 3 : 0;
  if (*count < n) {
    *count = n;
    return kInsufficientSize;
  }
  *count = n;
  if (n == 0) return kSuccess;
  put_process(infos, 4242, 3 * kGiB);
  put_process(infos + 24, static_cast<uint32_t>(getpid()), 1536 * kMiB);
  put_process(infos + 48, 777, ~uint64_t{0});  // NVML_VALUE_NOT_AVAILABLE
  return kSuccess;
}

}  // extern "C"
