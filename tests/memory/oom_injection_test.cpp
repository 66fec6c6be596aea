// InjectOom fails exactly the n-th allocation of its device, once; the CPU allocator's cap
// refuses what would pass it; and every out-of-memory message ends with the live allocations by
// tag (while a LiveTags observes) and what to try.
#include "memory/oom_injection.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "common/error_of.h"
#include "memory/allocator.h"
#include "memory/live_tags.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::test::error_of;

namespace {

// Restores the CPU allocator's cap when a test ends, however it ends.
struct CpuCap {
  explicit CpuCap(size_t bytes) { cpu_allocator().set_memory_cap_bytes(bytes); }
  ~CpuCap() { cpu_allocator().set_memory_cap_bytes(0); }
};

}  // namespace

TEST(InjectOom, FailsTheNthAllocationOfItsDeviceOnce) {
  std::vector<DataPtr> kept;
  InjectOom fail(Device::cpu(), 2);
  kept.push_back(meta_allocator().allocate(64));  // another device: not counted
  kept.push_back(cpu_allocator().allocate(64));
  kept.push_back(cpu_allocator().allocate(64));
  EXPECT_FALSE(fail.fired());
  const std::string msg =
      error_of<OutOfMemoryError>([&] { kept.push_back(cpu_allocator().allocate(100)); });
  EXPECT_NE(msg.find("injected by memory::InjectOom at allocation 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100 bytes"), std::string::npos) << msg;
  EXPECT_TRUE(fail.fired());
  EXPECT_EQ(fail.seen(), 3);
  kept.push_back(cpu_allocator().allocate(100));  // once only
  EXPECT_EQ(kept.size(), 4u);
}

TEST(InjectOom, ChangesNothingOnceGone) {
  { InjectOom fail(Device::cpu(), 0); }
  DataPtr p = cpu_allocator().allocate(64);
  EXPECT_NE(p.get(), nullptr);
}

TEST(CpuAllocatorCap, RefusesWhatWouldPassTheCapAndNamesIt) {
  const int64_t before_ooms = cpu_allocator().stats().num_ooms;
  const auto base = static_cast<size_t>(cpu_allocator().stats().reserved_bytes.current);
  CpuCap cap(base + 4096);
  EXPECT_EQ(cpu_allocator().memory_cap_bytes(), base + 4096);
  DataPtr fits = cpu_allocator().allocate(4096);
  const std::string msg = error_of<OutOfMemoryError>([&] { cpu_allocator().allocate(1); });
  EXPECT_NE(msg.find("CPU out of memory: tried to allocate 1 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exceed the memory cap of " + std::to_string(base + 4096)), std::string::npos)
      << msg;
  EXPECT_EQ(cpu_allocator().stats().num_ooms, before_ooms + 1);
  fits.reset();
  DataPtr again = cpu_allocator().allocate(4096);  // room once more
  EXPECT_NE(again.get(), nullptr);
}

TEST(CpuAllocatorCap, TheMetaAllocatorCountsItsCapToo) {
  // A dry run on meta under a budget fails where the device would.
  const auto base = static_cast<size_t>(meta_allocator().stats().reserved_bytes.current);
  meta_allocator().set_memory_cap_bytes(base + 1024);
  EXPECT_THROW(meta_allocator().allocate(2048), OutOfMemoryError);
  DataPtr fits = meta_allocator().allocate(1024);
  meta_allocator().set_memory_cap_bytes(0);
  EXPECT_EQ(fits.size(), 1024u);
}

TEST(OomReport, ListsTheLargestLiveAllocationsByTagAndWhatToTry) {
  LiveTags live(Device::cpu());
  DataPtr big, small;
  {
    ModuleScope m("features");
    ModuleScope block("3");
    PhaseScope fw(Phase::forward);
    big = cpu_allocator().allocate(3 << 20);
  }
  small = cpu_allocator().allocate(1 << 10);
  const auto base = static_cast<size_t>(cpu_allocator().stats().reserved_bytes.current);
  CpuCap cap(base);
  const std::string msg = error_of<OutOfMemoryError>([&] { cpu_allocator().allocate(64); });
  const size_t list = msg.find("largest live allocations by tag");
  ASSERT_NE(list, std::string::npos) << msg;
  const size_t first = msg.find("features.3 (forward)", list);
  const size_t second = msg.find("(resident)", list);
  ASSERT_NE(first, std::string::npos) << msg;
  EXPECT_NE(msg.find("3.0 MiB in     1 allocations  features.3 (forward)"), std::string::npos)
      << msg;
  EXPECT_LT(first, second) << "largest first";
  EXPECT_NE(msg.find("--memory-budget"), std::string::npos);
  EXPECT_NE(msg.find("--oom-recover"), std::string::npos);
  EXPECT_EQ(live.largest(1).at(0).bytes, 3 << 20);
}
