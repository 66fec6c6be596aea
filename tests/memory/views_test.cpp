// memory::summary, reset_peak_stats and empty_cache on the CPU and on the caching allocator over a
// fake device (registered as cuda:15): empty_cache gives back exactly the cached bytes and the
// summary's cells are the statistics.
#include "memory/views.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;
using frugal::memory::testing::FakeDevice;

namespace {

const Device kFake = Device::cuda(15);

// The four cells of the summary's row for `metric`, trimmed; empty when there is no such row.
std::vector<std::string> cells(const std::string& summary, const std::string& metric) {
  std::istringstream in(summary);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| " + metric + " ", 0) != 0) continue;
    std::vector<std::string> out;
    std::istringstream fields(line);
    std::string field;
    std::getline(fields, field, '|');  // before the first bar
    std::getline(fields, field, '|');  // the metric
    while (std::getline(fields, field, '|')) {
      const size_t a = field.find_first_not_of(' '), b = field.find_last_not_of(' ');
      if (a != std::string::npos) out.push_back(field.substr(a, b - a + 1));
    }
    return out;
  }
  return {};
}

// Registers a fake device as cuda:15 for one test.
struct RegisteredFake {
  RegisteredFake() { register_device_allocator(kFake, &dev.alloc); }
  ~RegisteredFake() { register_device_allocator(kFake, nullptr); }
  FakeDevice dev;
};

}  // namespace

TEST(MemoryViews, EmptyCacheReturnsTheCachedBytesOfTheFakeDevice) {
  RegisteredFake fake;
  DataPtr kept = allocator_for(kFake).allocate(kMiB);      // keeps its 2 MiB segment
  DataPtr big = allocator_for(kFake).allocate(30 * kMiB);  // a 30 MiB segment of its own
  DataPtr mid = allocator_for(kFake).allocate(2 * kMiB);   // a 20 MiB segment
  big.reset();
  mid.reset();
  const int64_t reserved = fake.dev.alloc.stats().reserved_bytes.current;
  ASSERT_EQ(reserved, static_cast<int64_t>(52 * kMiB));
  EXPECT_EQ(empty_cache(kFake), static_cast<int64_t>(50 * kMiB));
  EXPECT_EQ(fake.dev.alloc.stats().reserved_bytes.current,
            reserved - static_cast<int64_t>(50 * kMiB));
  EXPECT_EQ(fake.dev.source->used(), 2 * kMiB);
  EXPECT_EQ(empty_cache(kFake), 0);  // nothing cached any more
  kept.reset();
  EXPECT_EQ(empty_cache(kFake), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(fake.dev.alloc.stats().reserved_bytes.current, 0);
}

TEST(MemoryViews, CpuCachesNothing) {
  DataPtr p = allocator_for(Device::cpu()).allocate(4096);
  const int64_t reserved = cpu_allocator().stats().reserved_bytes.current;
  EXPECT_EQ(empty_cache(Device::cpu()), 0);
  EXPECT_EQ(cpu_allocator().stats().reserved_bytes.current, reserved);
  EXPECT_EQ(empty_cache(Device::meta()), 0);
}

TEST(MemoryViews, SummaryShowsTheFakeDevicesStatistics) {
  RegisteredFake fake;
  DataPtr a = allocator_for(kFake).allocate(1000);  // 1024 B in a 2 MiB segment
  DataPtr b = allocator_for(kFake).allocate(3 * kMiB);
  b.reset();  // 3 MiB freed, still cached in its 20 MiB segment
  const std::string s = summary(kFake);
  EXPECT_NE(s.find("memory summary, cuda:15"), std::string::npos) << s;
  // current, peak, total allocated, total freed
  EXPECT_EQ(cells(s, "Allocated memory"),
            (std::vector<std::string>{"1024 B", "3073 KiB", "3073 KiB", "3072 KiB"}))
      << s;
  EXPECT_EQ(cells(s, "Requested memory"),
            (std::vector<std::string>{"1000 B", "3072 KiB", "3072 KiB", "3072 KiB"}))
      << s;
  EXPECT_EQ(cells(s, "Reserved memory"),
            (std::vector<std::string>{"22528 KiB", "22528 KiB", "22528 KiB", "0 B"}))
      << s;
  EXPECT_EQ(cells(s, "Allocations"), (std::vector<std::string>{"1", "2", "2", "1"})) << s;
  EXPECT_EQ(cells(s, "Segments"), (std::vector<std::string>{"2", "2", "2", "0"})) << s;
  // 2 MiB segment minus the 1024 B block: the rest of a split segment is inactive split.
  EXPECT_EQ(cells(s, "Inactive split memory")[0], "2047 KiB") << s;
  EXPECT_NE(s.find("alloc retries: 0    OOMs: 0"), std::string::npos) << s;
  // 22 MiB reserved, 1 KiB allocated
  EXPECT_NE(s.find("reserved but unallocated: 22527 KiB"), std::string::npos) << s;
}

TEST(MemoryViews, ResetPeakStatsRestartsPeaksFromCurrent) {
  RegisteredFake fake;
  DataPtr a = allocator_for(kFake).allocate(kMiB);
  DataPtr b = allocator_for(kFake).allocate(5 * kMiB);
  b.reset();
  EXPECT_EQ(fake.dev.alloc.stats().allocated_bytes.peak, static_cast<int64_t>(6 * kMiB));
  reset_peak_stats(kFake);
  const MemoryStats s = fake.dev.alloc.stats();
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<int64_t>(kMiB));
  EXPECT_EQ(s.reserved_bytes.peak, s.reserved_bytes.current);
  EXPECT_EQ(cells(summary(kFake), "Allocated memory")[1], "1024 KiB");
}

TEST(MemoryViews, CpuSummaryMatchesItsStats) {
  DataPtr p = allocator_for(Device::cpu()).allocate(3 * kMiB);
  const MemoryStats st = cpu_allocator().stats();
  const std::string s = summary(Device::cpu());
  EXPECT_NE(s.find("memory summary, cpu"), std::string::npos);
  EXPECT_EQ(cells(s, "Allocations")[0], std::to_string(st.allocation.current) + "") << s;
  EXPECT_GE(st.allocated_bytes.current, static_cast<int64_t>(3 * kMiB));
  EXPECT_EQ(cells(s, "Allocated memory")[0],
            std::to_string(st.allocated_bytes.current / 1024) + " KiB")
      << s;
}
