// The allocation trace (allocation_trace.h): strict JSON in the trace-event format, one slice per
// allocation, counters that end at the allocator's figures, segment and OOM instants, and a cap.
#include "memory/allocation_trace.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "memory/caching_allocator.h"
#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;
using json = nlohmann::json;

namespace {

json written(const AllocationTrace& trace) {
  std::ostringstream os;
  trace.write_json(os);
  return json::parse(os.str());  // throws on anything that is not strict JSON
}

// The events of phase `ph` (and name, when given).
std::vector<json> of(const json& t, const std::string& ph, const std::string& name = "") {
  std::vector<json> out;
  for (const json& e : t.at("traceEvents")) {
    if (e.at("ph") == ph && (name.empty() || e.at("name") == name)) out.push_back(e);
  }
  return out;
}

}  // namespace

TEST(AllocationTrace, SlicesCountersAndInstantsOfACachingAllocator) {
  CachingAllocator a(std::make_unique<frugal::memory::testing::FakeDeviceSource>(64 * kMiB),
                     Device::cuda(0));
  DataPtr before = a.allocate(1000);  // live when the trace starts: in the counters' baseline
  AllocationTrace trace(Device::cuda(0), AllocationTrace::kDefaultMaxEvents, &a);
  DataPtr kept;
  {
    ModuleScope m("features");
    OpScope op("conv2d");
    DataPtr x = a.allocate(3000);
    kept = a.allocate(5 * kMiB);  // maps a 20 MiB segment
  }
  before.reset();
  trace.stop();
  const json t = written(trace);

  EXPECT_EQ(t.at("otherData").at("device"), "cuda:0");
  EXPECT_EQ(t.at("otherData").at("dropped_events"), 0);
  // Two allocations recorded (one slice still open, closed at the end); `before` is released but
  // was never recorded, so it has no slice.
  EXPECT_EQ(of(t, "b").size(), 2u);
  EXPECT_EQ(of(t, "e").size(), 2u);
  const json b = of(t, "b")[0];
  EXPECT_EQ(b.at("name"), "features/conv2d");
  EXPECT_EQ(b.at("cat"), "alloc");
  EXPECT_EQ(b.at("args").at("bytes"), 3000);
  EXPECT_EQ(b.at("args").at("op"), "conv2d");
  EXPECT_EQ(b.at("args").at("module"), "features");
  EXPECT_EQ(of(t, "e").back().at("args").at("live_at_end"), true);
  const MemoryStats s = a.stats();
  EXPECT_EQ(of(t, "C", "allocated").back().at("args").at("bytes"), s.requested_bytes.current);
  EXPECT_EQ(of(t, "C", "reserved").front().at("args").at("bytes"), 2 * kMiB);
  EXPECT_EQ(of(t, "C", "reserved").back().at("args").at("bytes"), s.reserved_bytes.current);
  ASSERT_EQ(of(t, "i", "segment map").size(), 1u);
  EXPECT_EQ(of(t, "i", "segment map")[0].at("args").at("bytes"), kMidSegmentBytes);
  EXPECT_EQ(trace.allocated_bytes(), s.requested_bytes.current);
}

TEST(AllocationTrace, OutOfMemoryIsAGlobalInstant) {
  CachingAllocator a(std::make_unique<frugal::memory::testing::FakeDeviceSource>(4 * kMiB),
                     Device::cuda(0));
  AllocationTrace trace(Device::cuda(0), 100, &a);
  {
    OpScope op("matmul");
    EXPECT_THROW(a.allocate(16 * kMiB), OutOfMemoryError);
  }
  const json t = written(trace);
  const std::vector<json> oom = of(t, "i", "out of memory");
  ASSERT_EQ(oom.size(), 1u);
  EXPECT_EQ(oom[0].at("s"), "g");
  EXPECT_EQ(oom[0].at("args").at("bytes"), 16 * kMiB);
  EXPECT_EQ(oom[0].at("args").at("op"), "matmul");
}

TEST(AllocationTrace, TheCapDropsEventsButClosesSlicesAndKeepsCountersExact) {
  const int64_t base = cpu_allocator().stats().requested_bytes.current;
  AllocationTrace trace(Device::cpu(), /*max_events=*/3);
  std::vector<DataPtr> ps;
  for (int i = 0; i < 5; ++i) ps.push_back(cpu_allocator().allocate(100));  // 3 kept, 2 dropped
  ps.clear();  // the 3 recorded releases are kept beyond the cap, the 2 others dropped
  trace.stop();
  DataPtr after = cpu_allocator().allocate(100);  // not recorded: stopped
  EXPECT_EQ(trace.recorded(), 6u);
  EXPECT_EQ(trace.dropped(), 4u);
  const json t = written(trace);
  EXPECT_EQ(t.at("otherData").at("dropped_events"), 4);
  EXPECT_EQ(of(t, "b").size(), 3u);
  EXPECT_EQ(of(t, "e").size(), 3u);
  EXPECT_EQ(of(t, "C", "reserved").size(), 0u);  // the CPU reserves what it allocates
  EXPECT_EQ(of(t, "C", "allocated").back().at("args").at("bytes"), base);
}

TEST(AllocationTrace, WritesAFileOrSaysWhyNot) {
  AllocationTrace trace(Device::cpu());
  DataPtr p = cpu_allocator().allocate(64);
  EXPECT_THROW(trace.write_json("/nonexistent-dir/trace.json"), Error);
  const std::string path = ::testing::TempDir() + "frugal_trace_test.json";
  trace.write_json(path);
  std::ifstream f(path);
  json parsed;
  EXPECT_NO_THROW(parsed = json::parse(f));
  EXPECT_TRUE(parsed.contains("traceEvents"));
}
