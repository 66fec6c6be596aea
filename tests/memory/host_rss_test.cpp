// memory::host_rss_bytes: the resident set grows by the pages a program touches.
#include "memory/host_rss.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

using namespace frugal;

TEST(HostRss, CountsThePagesTouched) {
  const int64_t before = memory::host_rss_bytes();
  ASSERT_GT(before, 0);
  constexpr size_t kBytes = size_t{64} << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);  // resident only once written
  const int64_t after = memory::host_rss_bytes();
  EXPECT_GE(after - before, static_cast<int64_t>(kBytes / 2)) << before << " -> " << after;
  EXPECT_EQ(block[kBytes - 1], 1);
}
