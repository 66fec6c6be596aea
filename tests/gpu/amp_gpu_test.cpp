// CUDA loss-scaling kernels against their CPU twins: fused unscale and the flag, the scale
// update's transitions, count_step and AdamW with its step count on the device.
#include <limits>

#include "gpu_test_util.h"
#include "kernels/amp.h"
#include "kernels/optim.h"

using namespace frugal;
using namespace frugal::gputest;

namespace {

std::vector<float> scalar_values(const DeviceBuffer& b) { return b.download(); }

}  // namespace

TEST(AmpGpu, UnscaleAndCheckMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{300007}}) {
    for (int64_t bad_at : {int64_t{-1}, int64_t{0}, n - 1}) {
      std::vector<float> g = random_values(static_cast<size_t>(n), 3, DType::f32, -500.f, 500.f);
      if (bad_at >= 0) g[static_cast<size_t>(bad_at)] = std::numeric_limits<float>::infinity();
      std::vector<float> ref = g;
      float scale = 32768.0f, found_ref = 0.0f;
      kernels::unscale_and_check(cpu(), n, ref.data(), &scale, &found_ref);

      DeviceBuffer dg = to_device(DType::f32, g), ds = to_device(DType::f32, {scale});
      DeviceBuffer df = to_device(DType::f32, {0.0f});
      kernels::unscale_and_check(gpu(), n, dg.as<float>(), ds.as<float>(), df.as<float>());
      std::vector<float> out = dg.download();
      for (size_t i = 0; i < out.size(); ++i) {
        if (static_cast<int64_t>(i) == bad_at) continue;
        ASSERT_EQ(out[i], ref[i]) << "n " << n << " element " << i;  // one exact multiply
      }
      EXPECT_EQ(scalar_values(df)[0], found_ref) << "n " << n << " bad at " << bad_at;
    }
  }
}

TEST(AmpGpu, UpdateScaleMatchesCpuOverASequence) {
  SKIP_WITHOUT_GPU();
  const float flags[] = {0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0};
  float scale = 65536.0f, tracker = 0.0f;
  DeviceBuffer ds = to_device(DType::f32, {scale}), dt = to_device(DType::f32, {tracker});
  for (float f : flags) {
    float flag = f;
    kernels::update_scale(cpu(), &scale, &tracker, &flag, 2.0, 0.5, 3);
    DeviceBuffer df = to_device(DType::f32, {f});
    kernels::update_scale(gpu(), ds.as<float>(), dt.as<float>(), df.as<float>(), 2.0, 0.5, 3);
    EXPECT_EQ(ds.download()[0], scale);
    EXPECT_EQ(dt.download()[0], tracker);
  }
}

TEST(AmpGpu, AdamWWithDeviceStepCountMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1001;
  std::vector<float> g = random_values(n, 8, DType::f32), p = random_values(n, 9, DType::f32);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  DeviceBuffer dg = to_device(DType::f32, g), dp = to_device(DType::f32, p);
  DeviceBuffer dm = to_device(DType::f32, m), dv = to_device(DType::f32, v);
  DeviceBuffer dstep = to_device(DType::f32, {0.0f});
  float step = 0.0f;
  const float flags[] = {0, 1, 0};
  for (float f : flags) {
    DeviceBuffer df = to_device(DType::f32, {f});
    float flag = f;
    kernels::count_step(cpu(), &step, &flag);
    kernels::AdamWParams k;
    k.lr = 0.01;
    k.step_count = &step;
    kernels::adamw_step(cpu(), n, p.data(), g.data(), m.data(), v.data(), k, &flag);
    kernels::count_step(gpu(), dstep.as<float>(), df.as<float>());
    k.step_count = dstep.as<float>();
    kernels::adamw_step(gpu(), n, dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), k,
                        df.as<float>());
  }
  EXPECT_EQ(dstep.download()[0], 2.0f);
  EXPECT_CLOSE(dp.download(), p, 1e-6);
  EXPECT_CLOSE(dm.download(), m, 1e-6);
  EXPECT_CLOSE(dv.download(), v, 1e-6);
}
