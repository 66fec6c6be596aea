// FRUGAL_HOST_PROFILE=1: dispatcher calls are counted by name, phases stay out of the kernel
// total, reset() clears. The flag is read once per process; ctest runs each test in its own
// process, so setting it first thing here takes effect.
#include "kernels/host_profile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/elementwise.h"

using namespace frugal;
namespace hp = kernels::host_profile;

TEST(HostProfile, CountsDispatcherCallsByNameAndResets) {
  setenv("FRUGAL_HOST_PROFILE", "1", 1);
  if (!hp::enabled()) GTEST_SKIP() << "the flag was read before this test set it (run alone)";
  hp::reset();
  std::vector<float> y(1000);
  kernels::Context cpu = kernels::Context::of(Device::cpu());
  {
    hp::Scope phase("phase test");
    for (int i = 0; i < 3; ++i) kernels::fill(cpu, DType::f32, 1000, y.data(), 2.0);
  }
  EXPECT_EQ(y[999], 2.0f);
  std::string r = hp::report();
  EXPECT_NE(r.find("       3 calls"), std::string::npos) << r;
  EXPECT_NE(r.find("  fill\n"), std::string::npos) << r;
  EXPECT_NE(r.find("  phase test\n"), std::string::npos) << r;
  hp::reset();
  r = hp::report();
  EXPECT_EQ(r.find("fill"), std::string::npos) << r;
  EXPECT_NE(r.find("0.00 ms inside kernel entries"), std::string::npos) << r;
}
