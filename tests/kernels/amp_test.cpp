// Loss-scaling kernels on the CPU against plain loops: fused unscale with the non-finite check
// (odd sizes, across the parallel chunks), every transition of update_scale, and count_step.
#include "kernels/amp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/optim.h"

using namespace frugal;
using test::cpu_ctx;

namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed, double scale) {
  std::vector<double> v = test::random_values(n, seed);
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(v[i] * scale);
  return f;
}

}  // namespace

TEST(AmpKernels, UnscaleMultipliesByTheReciprocalOfTheScale) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{70001}}) {
    for (float scale : {65536.0f, 3.0f}) {
      std::vector<float> g = random_floats(n, 11 + static_cast<uint32_t>(n), 1000.0);
      std::vector<float> ref(g.size());
      const float inv = 1.0f / scale;
      for (size_t i = 0; i < g.size(); ++i) ref[i] = g[i] * inv;
      float found = 0.0f;
      kernels::unscale_and_check(cpu_ctx(), n, g.data(), &scale, &found);
      EXPECT_EQ(g, ref) << "n " << n << " scale " << scale;
      EXPECT_EQ(found, 0.0f);
    }
  }
}

TEST(AmpKernels, AnyNonFiniteValueSetsTheFlagAndACleanTensorDoesNotClearIt) {
  const float values[] = {std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  const int64_t n = 50001;  // several parallel chunks; the bad value goes in different ones
  for (float bad : values) {
    for (int64_t at : {int64_t{0}, n / 2 + 3, n - 1}) {
      std::vector<float> g = random_floats(n, 5, 10.0);
      g[static_cast<size_t>(at)] = bad;
      float scale = 1024.0f, found = 0.0f;
      kernels::unscale_and_check(cpu_ctx(), n, g.data(), &scale, &found);
      EXPECT_EQ(found, 1.0f) << "bad value " << bad << " at " << at;
      const size_t probe = at == 0 ? 1 : 0;  // the finite values are still unscaled
      EXPECT_EQ(g[probe], random_floats(n, 5, 10.0)[probe] * (1.0f / 1024.0f));
      // The flag accumulates over tensors: a later clean tensor leaves it set.
      std::vector<float> clean = random_floats(17, 6, 1.0);
      kernels::unscale_and_check(cpu_ctx(), 17, clean.data(), &scale, &found);
      EXPECT_EQ(found, 1.0f);
    }
  }
  // A finite value larger than f16's range is not an overflow of the f32 gradient.
  std::vector<float> big = {1e30f, -3e38f};
  float scale = 2.0f, found = 0.0f;
  kernels::unscale_and_check(cpu_ctx(), 2, big.data(), &scale, &found);
  EXPECT_EQ(found, 0.0f);
}

TEST(AmpKernels, UpdateScaleTransitions) {
  float scale = 1024.0f, tracker = 0.0f, inf = 0.0f;
  // Clean steps below the interval: the tracker counts, the scale stays.
  for (int i = 1; i <= 3; ++i) {
    kernels::update_scale(cpu_ctx(), &scale, &tracker, &inf, 2.0, 0.5, 4);
    EXPECT_EQ(scale, 1024.0f);
    EXPECT_EQ(tracker, static_cast<float>(i));
  }
  // The interval-th clean step grows and resets.
  kernels::update_scale(cpu_ctx(), &scale, &tracker, &inf, 2.0, 0.5, 4);
  EXPECT_EQ(scale, 2048.0f);
  EXPECT_EQ(tracker, 0.0f);
  // An overflow backs off and resets the tracker, whatever it was.
  kernels::update_scale(cpu_ctx(), &scale, &tracker, &inf, 2.0, 0.5, 4);
  ASSERT_EQ(tracker, 1.0f);
  inf = 1.0f;
  kernels::update_scale(cpu_ctx(), &scale, &tracker, &inf, 2.0, 0.5, 4);
  EXPECT_EQ(scale, 1024.0f);
  EXPECT_EQ(tracker, 0.0f);
  // Growth that would overflow f32 keeps the scale (PyTorch checks the grown value).
  float huge = 3e38f, t2 = 0.0f, clean = 0.0f;
  kernels::update_scale(cpu_ctx(), &huge, &t2, &clean, 2.0, 0.5, 1);
  EXPECT_EQ(huge, 3e38f);
  EXPECT_EQ(t2, 0.0f);
  EXPECT_THROW(kernels::update_scale(cpu_ctx(), &scale, &tracker, &inf, 2.0, 0.5, 0), Error);
}

TEST(AmpKernels, CountStepSkipsOnTheFlag) {
  float step = 0.0f, inf = 0.0f;
  kernels::count_step(cpu_ctx(), &step, &inf);
  kernels::count_step(cpu_ctx(), &step, nullptr);
  EXPECT_EQ(step, 2.0f);
  inf = 1.0f;
  kernels::count_step(cpu_ctx(), &step, &inf);
  EXPECT_EQ(step, 2.0f);
}

TEST(AmpKernels, AdamWReadsTheDeviceStepCountLikeTheHostOne) {
  const int64_t n = 33;
  std::vector<float> g = random_floats(n, 21, 1.0);
  std::vector<float> p1 = random_floats(n, 22, 1.0), m1(n, 0.1f), v1(n, 0.2f);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  kernels::AdamWParams host;
  host.step = 7;
  kernels::adamw_step(cpu_ctx(), n, p1.data(), g.data(), m1.data(), v1.data(), host, nullptr);
  kernels::AdamWParams dev;
  float count = 7.0f;
  dev.step = 1;  // ignored when step_count is given
  dev.step_count = &count;
  kernels::adamw_step(cpu_ctx(), n, p2.data(), g.data(), m2.data(), v2.data(), dev, nullptr);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}
