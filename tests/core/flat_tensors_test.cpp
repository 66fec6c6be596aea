// Note [Flat resident tensors]: tensors carved from one allocation, each with a storage of its
// own, the allocation freed with the last of them and observed as one.
#include "core/flat_tensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/factory.h"
#include "core/ops.h"
#include "memory/allocator.h"
#include "memory/step_trace.h"

using namespace frugal;

namespace {

uintptr_t addr(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }
int64_t cpu_allocations() {
  return memory::allocator_for(Device::cpu()).stats().allocation.current;
}

}  // namespace

TEST(FlatTensors, OneAllocationHoldsEveryTensorAt512ByteBoundaries) {
  const int64_t before = cpu_allocations();
  const int64_t bytes_before = memory::allocator_for(Device::cpu()).stats().allocated_bytes.current;
  std::vector<Tensor> t = empty_flat(
      {{{3, 5}, {DType::f32}}, {{0}, {DType::f32}}, {{200}, {DType::f16}}, {{7}, {DType::f32}}});
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(cpu_allocations(), before + 1);
  // 60 bytes, none, 400 bytes, 28 bytes: 512-byte parts, the empty tensor takes none.
  EXPECT_EQ(memory::allocator_for(Device::cpu()).stats().allocated_bytes.current,
            bytes_before + 3 * 512);
  EXPECT_EQ(addr(t[2]) - addr(t[0]), 512u);
  EXPECT_EQ(addr(t[3]) - addr(t[0]), 1024u);
  EXPECT_EQ(t[1].numel(), 0);
  EXPECT_EQ(t[2].dtype(), DType::f16);
  EXPECT_EQ(t[0].shape(), (Shape{3, 5}));
  EXPECT_NE(&t[0].impl().storage, &t[3].impl().storage);
  // Storages of their own: writes and version counters do not cross.
  fill_(t[0], 2.0);
  fill_(t[3], 5.0);
  EXPECT_EQ(t[0].to_vector(), std::vector<double>(15, 2.0));
  EXPECT_EQ(t[3].to_vector(), std::vector<double>(7, 5.0));
  const uint64_t v3 = t[3].impl().storage->version;
  fill_(t[0], 1.0);
  EXPECT_EQ(t[3].impl().storage->version, v3);
  // The allocation goes with the last tensor.
  Tensor last = t[3];
  t.clear();
  EXPECT_EQ(cpu_allocations(), before + 1);
  EXPECT_EQ(last.to_vector(), std::vector<double>(7, 5.0));
  last = Tensor();
  EXPECT_EQ(cpu_allocations(), before);
}

TEST(FlatTensors, ObserversSeeOneAllocationAndItsRelease) {
  memory::StepRecorder rec(Device::cpu());
  {
    std::vector<Tensor> t = zeros_flat({{{100}, {DType::f32}}, {{1000}, {DType::f32}}});
    EXPECT_EQ(t[1].to_vector(), std::vector<double>(1000, 0.0));
    t.pop_back();  // a part's release is not an event
  }
  memory::StepTrace trace = rec.finish();
  ASSERT_EQ(trace.allocations.size(), 1u);
  EXPECT_EQ(trace.allocations[0].bytes, 512u + 4096u);
  EXPECT_NE(trace.allocations[0].end, memory::kStillLive);
}

TEST(FlatTensors, RefusesMixedDevicesAndNegativeExtentsBeforeAllocating) {
  const int64_t before = cpu_allocations();
  try {
    (void)empty_flat({{{4}, {DType::f32, Device::cpu()}}, {{4}, {DType::f32, Device::meta()}}});
    FAIL() << "mixed devices were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one allocation serves one device"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)empty_flat({{Shape{std::vector<int64_t>{2, -1}}, {DType::f32}}}), Error);
  EXPECT_EQ(cpu_allocations(), before);
  EXPECT_TRUE(empty_flat({}).empty());
  std::vector<Tensor> on_meta = zeros_flat({{{64}, {DType::f32, Device::meta()}}});
  EXPECT_EQ(on_meta[0].device(), Device::meta());
}
