// frugal estimate --max-batch: a largest batch at the limit of --batch says so, since the search
// stops there and more may fit.
#include <gtest/gtest.h>

#include <string>

#include "tools/run_command.h"

using frugal::tools::run_command;

TEST(EstimateCommand, ABestAtTheLargestBatchSaysMoreMayFit) {
  ::testing::internal::CaptureStdout();
  const int rc = run_command(
      "estimate", {"--model", "mobilenet_v1", "--width", "0.25", "--input", "1x4x4", "--classes",
                   "2", "--max-batch", "--memory-budget", "1000GiB", "--granularity", "262144"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("1048576 or more (the largest --batch)"), std::string::npos) << out;
}
