// CUDA loss-scaling kernels against their CPU twins: fused unscale and the flag, autocast's
// lower_many, the scale update's transitions, count_step and AdamW with its step count on the
// device.
#include <limits>

#include "gpu_test_util.h"
#include "kernels/amp.h"
#include "kernels/elementwise.h"
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

// Many tensors in one call, more than one launch's list (32), an empty one among them, with and
// without an inf in one tensor; each matches the one-tensor kernel on the CPU exactly.
TEST(AmpGpu, UnscaleAndCheckManyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (int bad_tensor : {-1, 0, 40}) {
    std::vector<std::vector<float>> host;
    std::vector<DeviceBuffer> dev;
    std::vector<float*> pointers;
    std::vector<int64_t> sizes;
    float scale = 1024.0f, found_ref = 0.0f;
    for (int t = 0; t < 45; ++t) {
      const int64_t n = t == 7 ? 0 : 1 + (t * 7919) % 70001;
      auto g = random_values(static_cast<size_t>(n), 50 + t, DType::f32, -100.f, 100.f);
      if (t == bad_tensor) g[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
      dev.push_back(to_device(DType::f32, g));
      kernels::unscale_and_check(cpu(), n, g.data(), &scale, &found_ref);
      host.push_back(std::move(g));
      sizes.push_back(n);
    }
    for (DeviceBuffer& d : dev) pointers.push_back(d.as<float>());
    DeviceBuffer ds = to_device(DType::f32, {scale}), df = to_device(DType::f32, {0.0f});
    kernels::unscale_and_check_many(gpu(), static_cast<int64_t>(pointers.size()), pointers.data(),
                                    sizes.data(), ds.as<float>(), df.as<float>());
    for (size_t t = 0; t < dev.size(); ++t) {
      std::vector<float> out = dev[t].download();
      for (size_t i = 0; i < out.size(); ++i) {
        if (static_cast<int>(t) == bad_tensor && i == out.size() / 2) continue;
        ASSERT_EQ(out[i], host[t][i]) << "tensor " << t << " element " << i;
      }
    }
    EXPECT_EQ(scalar_values(df)[0], found_ref) << "bad tensor " << bad_tensor;
  }
}

// lower_many rounds exactly as the CPU's cast does, over more tensors than one launch takes and
// with an empty one among them.
TEST(AmpGpu, LowerManyMatchesCpuCastBitForBit) {
  SKIP_WITHOUT_GPU();
  for (DType to : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(to));
    std::vector<std::vector<float>> host;
    std::vector<DeviceBuffer> src, dst;
    std::vector<const float*> srcs;
    std::vector<void*> dsts;
    std::vector<int64_t> sizes;
    for (int t = 0; t < 45; ++t) {
      const int64_t n = t == 5 ? 0 : 1 + (t * 7919) % 40009;
      host.push_back(random_values(static_cast<size_t>(n), 80 + t, DType::f32, -70000.f, 70000.f));
      src.push_back(to_device(DType::f32, host.back()));
      dst.emplace_back(to, n);
      dst.back().poison();
      sizes.push_back(n);
    }
    for (size_t t = 0; t < src.size(); ++t) {
      srcs.push_back(src[t].as<float>());
      dsts.push_back(dst[t].get());
    }
    kernels::lower_many(gpu(), to, static_cast<int64_t>(srcs.size()), srcs.data(), dsts.data(),
                        sizes.data());
    for (size_t t = 0; t < src.size(); ++t) {
      std::vector<uint16_t> ref(host[t].size()), got(host[t].size());
      kernels::cast(cpu(), DType::f32, to, sizes[t], host[t].data(), ref.data());
      dst[t].download_raw(got.data());
      ASSERT_EQ(got, ref) << "tensor " << t;
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

  // The learning rate read from the device (Note [Learning rate on the device]), the CPU
  // reading the same f32 through a host pointer; the by-value lr is deliberately wrong.
  const float lr = 0.003f;
  DeviceBuffer dlr = to_device(DType::f32, {lr});
  kernels::AdamWParams k;
  k.lr = 99.0, k.weight_decay = 0.1;
  k.step_count = &step;
  k.lr_device = &lr;
  kernels::adamw_step(cpu(), n, p.data(), g.data(), m.data(), v.data(), k, nullptr);
  k.step_count = dstep.as<float>();
  k.lr_device = dlr.as<float>();
  kernels::adamw_step(gpu(), n, dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), k,
                      nullptr);
  EXPECT_CLOSE(dp.download(), p, 1e-6);
  EXPECT_CLOSE(dv.download(), v, 1e-6);
}
