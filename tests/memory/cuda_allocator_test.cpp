// The caching allocator on a real CUDA device (skipped without one): data round trip, a
// device-sized OOM that leaves no sticky CUDA error, the cap, and pinned host memory.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "memory/cuda_allocators.h"

#ifdef FRUGAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace frugal;
using namespace frugal::memory;

#ifndef FRUGAL_WITH_CUDA
TEST(CudaCachingAllocator, CpuBuildSeesNoDevice) { EXPECT_EQ(cuda_device_count(), 0); }
#else
TEST(CudaCachingAllocator, RealDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Allocator& a = allocator_for(Device::cuda(0));
  CachingAllocator& ca = cuda_caching_allocator(0);
  ASSERT_EQ(&a, &ca);
  EXPECT_THROW(allocator_for(Device::cuda(cuda_device_count())), Error);
  const MemoryStats before = ca.stats();

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> host(1001), back(1001, 0.0f);
  for (float& v : host) v = u(rng);
  DataPtr p = a.allocate(host.size() * sizeof(float));
  ASSERT_EQ(cudaMemcpy(p.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), p.get(), host.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, back);
  EXPECT_EQ(ca.stats().allocated_bytes.current - before.allocated_bytes.current, 4096);
  ca.check_invariants();

  const size_t total = ca.source().total_bytes();
  ASSERT_GT(total, 0u);
  std::string msg;
  try {
    DataPtr too_big = a.allocate(2 * total);
  } catch (const OutOfMemoryError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("cuda:0 out of memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("device total:"), std::string::npos) << msg;
  EXPECT_EQ(ca.stats().num_ooms, before.num_ooms + 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failed cudaMalloc left nothing behind
  ca.check_invariants();

  DataPtr q = a.allocate(50 * kMiB + 3);
  EXPECT_EQ(cudaMemset(q.get(), 1, 50 * kMiB + 3), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  q.reset();
  ca.set_memory_fraction(0.001);
  EXPECT_THROW(a.allocate(total / 100), OutOfMemoryError);
  ca.set_memory_cap_bytes(0);
  p.reset();
  ca.empty_cache();
  EXPECT_EQ(ca.stats().reserved_bytes.current, 0);
  ca.check_invariants();

  Allocator& pinned = pinned_host_allocator();
  EXPECT_NE(&pinned, &cpu_allocator());
  DataPtr h = pinned.allocate(4096);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h.get()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
}
#endif
