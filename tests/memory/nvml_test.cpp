// memory::Nvml without a GPU: a missing library, a library that is not NVML, and a stand-in
// libnvidia-ml (fake_nvml/fake_nvml.cpp, loaded by path) for the queries, the process list's
// count-then-fill round trip, the record layout and the failures of init and of an empty machine.
#include "memory/nvml.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

using namespace frugal::memory;

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

void expect_empty(const Nvml& nvml) {
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.device_count(), 0);
  EXPECT_FALSE(nvml.device(0).has_value());
  EXPECT_TRUE(nvml.devices().empty());
  EXPECT_TRUE(nvml.processes(0).empty());
  EXPECT_FALSE(nvml.process_used_bytes(0, getpid()).has_value());
}

// Sets an environment variable for one scope.
struct EnvScope {
  explicit EnvScope(const char* name) : name_(name) { setenv(name, "1", 1); }
  ~EnvScope() { unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST(Nvml, MissingLibraryIsNotAvailableAndSaysWhy) {
  Nvml nvml("libfrugal-no-such-nvml.so.1");
  expect_empty(nvml);
  EXPECT_NE(nvml.why_not().find("libfrugal-no-such-nvml.so.1 could not be loaded"),
            std::string::npos)
      << nvml.why_not();
}

TEST(Nvml, ALibraryWithoutNvmlIsNotAvailable) {
  Nvml nvml("libc.so.6");
  expect_empty(nvml);
  EXPECT_NE(nvml.why_not().find("libc.so.6 has no nvmlInit_v2"), std::string::npos)
      << nvml.why_not();
}

TEST(Nvml, ReadsDevicesFromTheLibrary) {
  Nvml nvml(FRUGAL_FAKE_NVML);
  ASSERT_TRUE(nvml.available()) << nvml.why_not();
  EXPECT_EQ(nvml.why_not(), "");
  EXPECT_EQ(nvml.device_count(), 2);
  const std::vector<GpuDeviceInfo> devices = nvml.devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].index, 0);
  EXPECT_EQ(devices[0].name, "Fake H200");
  EXPECT_EQ(devices[0].total_bytes, 141 * kGiB);
  EXPECT_EQ(devices[0].used_bytes, 5 * kGiB);
  EXPECT_EQ(devices[0].free_bytes, 136 * kGiB);
  EXPECT_EQ(devices[0].gpu_utilization, 87);
  EXPECT_EQ(devices[0].memory_utilization, 41);
  // Utilisation not supported: unknown, the memory numbers still come.
  EXPECT_EQ(devices[1].name, "Fake A100");
  EXPECT_EQ(devices[1].total_bytes, 80 * kGiB);
  EXPECT_EQ(devices[1].gpu_utilization, -1);
  EXPECT_EQ(devices[1].memory_utilization, -1);
  EXPECT_FALSE(nvml.device(2).has_value());
}

TEST(Nvml, ListsProcessesWithTheirMemory) {
  Nvml nvml(FRUGAL_FAKE_NVML);
  const std::vector<GpuProcessInfo> procs = nvml.processes(0);
  ASSERT_EQ(procs.size(), 3u);
  EXPECT_EQ(procs[0].pid, 4242);
  EXPECT_EQ(procs[0].used_bytes, 3 * kGiB);
  EXPECT_EQ(procs[0].device, 0);
  EXPECT_EQ(procs[1].pid, getpid());
  EXPECT_EQ(procs[2].pid, 777);
  EXPECT_EQ(procs[2].used_bytes, -1);  // NVML_VALUE_NOT_AVAILABLE
  EXPECT_EQ(nvml.process_used_bytes(0, getpid()), 1536 * kMiB);
  EXPECT_FALSE(nvml.process_used_bytes(0, 777).has_value());
  EXPECT_FALSE(nvml.process_used_bytes(1, getpid()).has_value());
  EXPECT_TRUE(nvml.processes(1).empty());
  EXPECT_TRUE(nvml.processes(5).empty());
}

TEST(Nvml, FailedInitIsNotAvailableAndNamesTheError) {
  EnvScope fail("FAKE_NVML_INIT_FAIL");
  Nvml nvml(FRUGAL_FAKE_NVML);
  expect_empty(nvml);
  EXPECT_EQ(nvml.why_not(), "nvmlInit_v2 failed: Driver Not Loaded");
}

TEST(Nvml, NoGpuIsNotAvailable) {
  EnvScope none("FAKE_NVML_NO_GPU");
  Nvml nvml(FRUGAL_FAKE_NVML);
  expect_empty(nvml);
  EXPECT_EQ(nvml.why_not(), "NVML sees no GPU");
}
