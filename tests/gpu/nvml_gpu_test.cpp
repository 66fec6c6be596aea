// NVML against the CUDA runtime on a real GPU (skipped without one): the device total NVML reports
// is cudaMemGetInfo's, and memory taken through frugal's caching allocator shows in the used
// memory NVML charges the device and this process. Written without device time: not yet run on
// the device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "gpu_test_util.h"
#include "memory/cuda_allocators.h"
#include "memory/nvml.h"
#include "memory/views.h"

using namespace frugal;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGrowth = 256 * kMiB;

// NVML reports pids as the host sees them; inside another pid namespace (a container) this
// process's getpid() is not among them. PROC_PID_INIT_INO is the initial namespace's inode.
bool in_initial_pid_namespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 && st.st_ino == 0xEFFFFFFCu;
}

}  // namespace

TEST(NvmlGpu, DeviceTotalIsCudasAndUsedGrowsWithFrugalAllocations) {
  SKIP_WITHOUT_GPU();
  // NVML and CUDA number devices alike only when nothing reorders them.
  if (const char* order = std::getenv("CUDA_DEVICE_ORDER");
      memory::cuda_device_count() > 1 && (order == nullptr || std::string(order) != "PCI_BUS_ID")) {
    GTEST_SKIP() << "several GPUs: set CUDA_DEVICE_ORDER=PCI_BUS_ID so cuda:0 is NVML's device 0";
  }
  memory::Nvml nvml;
  ASSERT_TRUE(nvml.available()) << "a CUDA device but no NVML: " << nvml.why_not();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // the context first: its memory is not ours to count
  size_t cuda_free = 0, cuda_total = 0;
  ASSERT_EQ(cudaMemGetInfo(&cuda_free, &cuda_total), cudaSuccess);
  const std::optional<memory::GpuDeviceInfo> before = nvml.device(0);
  ASSERT_TRUE(before.has_value());
  EXPECT_FALSE(before->name.empty());
  // Equal on the drivers seen so far; 1% leaves room for a reservation one side might not count.
  EXPECT_NEAR(static_cast<double>(before->total_bytes), static_cast<double>(cuda_total),
              0.01 * static_cast<double>(cuda_total))
      << "NVML total " << before->total_bytes << ", cudaMemGetInfo total " << cuda_total;
  EXPECT_EQ(before->used_bytes + before->free_bytes, before->total_bytes);

  // Empty the cache so that the request below takes a new segment from cudaMalloc.
  memory::empty_cache(Device::cuda(0));
  memory::Allocator& alloc = memory::allocator_for(Device::cuda(0));
  const int64_t reserved_before = alloc.stats().reserved_bytes.current;
  const std::optional<int64_t> mine_before = nvml.process_used_bytes(0, getpid());
  memory::DataPtr p = alloc.allocate(static_cast<size_t>(kGrowth));
  ASSERT_EQ(cudaMemset(p.get(), 1, static_cast<size_t>(kGrowth)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_GE(alloc.stats().reserved_bytes.current - reserved_before, kGrowth);
  const std::optional<memory::GpuDeviceInfo> after = nvml.device(0);
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(after->used_bytes - before->used_bytes, kGrowth)
      << "device used " << before->used_bytes << " -> " << after->used_bytes;

  const std::optional<int64_t> mine_after = nvml.process_used_bytes(0, getpid());
  if (!mine_after.has_value() && !in_initial_pid_namespace()) {
    GTEST_SKIP() << "NVML lists no process " << getpid()
                 << ": this process runs in another pid namespace (a container)";
  }
  ASSERT_TRUE(mine_after.has_value())
      << "NVML does not list this process (pid " << getpid() << ") on device 0";
  ASSERT_TRUE(mine_before.has_value());  // the context was made before
  EXPECT_GE(*mine_after - *mine_before, kGrowth)
      << "process used " << *mine_before << " -> " << *mine_after;
}
