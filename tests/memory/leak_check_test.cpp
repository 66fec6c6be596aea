// LeakCheck (leak_check.h): what was allocated inside and is still alive, grouped by tag, largest
// first; what was made before it or released inside it does not count; finish() acts, the
// destructor never throws.
#include "memory/leak_check.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "memory/allocator.h"

using namespace frugal;
using namespace frugal::memory;

TEST(LeakCheck, GroupsWhatIsStillAliveByTagLargestFirst) {
  DataPtr before = cpu_allocator().allocate(100);
  std::vector<DataPtr> kept;
  LeakCheck check;
  before.reset();  // made before the check: not its business
  {
    OpScope op("conv2d");
    ModuleScope m("features");
    kept.push_back(cpu_allocator().allocate(1000));
    kept.push_back(cpu_allocator().allocate(1000));
    DataPtr transient = cpu_allocator().allocate(1 << 20);
  }
  {
    OpScope op("cross_entropy");
    kept.push_back(cpu_allocator().allocate(4));
  }
  kept.push_back(meta_allocator().allocate(5000));
  check.finish();
  DataPtr after = cpu_allocator().allocate(100);  // after finish: not seen
  const std::vector<Leak> leaks = check.leaks();
  ASSERT_EQ(leaks.size(), 3u);
  EXPECT_EQ(leaks[0].name, "untagged");
  EXPECT_EQ(leaks[0].device, Device::meta());
  EXPECT_EQ(leaks[0].bytes, 5000u);
  EXPECT_EQ(leaks[1].name, "features/conv2d");
  EXPECT_EQ(leaks[1].bytes, 2000u);
  EXPECT_EQ(leaks[1].count, 2);
  EXPECT_EQ(leaks[1].tag->op, "conv2d");
  EXPECT_EQ(leaks[2].name, "cross_entropy");
  const std::string report = check.report();
  EXPECT_NE(report.find("4 allocations (6.8 KiB)"), std::string::npos) << report;
  EXPECT_NE(report.find("2.0 KiB in 2 allocations on cpu: features/conv2d"), std::string::npos)
      << report;
  kept.clear();  // released after finish: still reported, the check has stopped
  EXPECT_EQ(check.leaks().size(), 3u);
}

TEST(LeakCheck, ReleasedInsideLeavesNothingAndADeviceFilterLooksAtOneDevice) {
  LeakCheck check({.at_end = LeakAction::throw_error, .device = Device::cpu()});
  DataPtr elsewhere = meta_allocator().allocate(64);
  { DataPtr p = cpu_allocator().allocate(64); }
  EXPECT_NO_THROW(check.finish());
  EXPECT_TRUE(check.leaks().empty());
  EXPECT_EQ(check.report(), "");
}

TEST(LeakCheck, FinishThrowsOnRequestButTheDestructorOnlyWarns) {
  DataPtr kept;
  {
    LeakCheck check({.at_end = LeakAction::throw_error});
    kept = cpu_allocator().allocate(64);
    EXPECT_THROW(check.finish(), Error);
    EXPECT_NO_THROW(check.finish());  // acts once
  }
  ::testing::internal::CaptureStderr();
  {
    LeakCheck check({.at_end = LeakAction::throw_error});
    DataPtr leak = cpu_allocator().allocate(64);
    kept = std::move(leak);
  }  // not finished: warns
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("LeakCheck: 1 allocation (64 B)"),
            std::string::npos);
}
