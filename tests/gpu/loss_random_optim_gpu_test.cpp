// CUDA vs CPU: cross-entropy with label smoothing (f32 logits), random fills and dropout (bit
// for bit), and the fused SGD / AdamW updates including the found_inf skip.
#include "core/factory.h"
#include "gpu_test_util.h"
#include "kernels/loss.h"
#include "kernels/optim.h"
#include "kernels/random.h"
#include "models/blocks.h"
#include "optim/optimizer.h"

using namespace frugal;
using namespace frugal::gputest;

TEST(GpuLoss, CrossEntropyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (int64_t c : {10, 1000}) {
    for (double smoothing : {0.0, 0.1}) {
      SCOPED_TRACE(detail::str("classes ", c, " smoothing ", smoothing));
      const int64_t n = 37;
      auto logits = random_values(static_cast<size_t>(n * c), 51, DType::f32, -5, 5);
      auto dloss = random_values(static_cast<size_t>(n), 52, DType::f32);
      std::vector<int64_t> labels(n);
      for (int64_t i = 0; i < n; ++i) labels[i] = (i * 7919) % c;
      std::vector<float> loss(n), lse(n), dlogits(n * c);
      kernels::cpu::cross_entropy_forward(cpu(), DType::f32, n, c, logits.data(), labels.data(),
                                          smoothing, loss.data(), lse.data());
      kernels::cpu::cross_entropy_backward(cpu(), DType::f32, n, c, logits.data(), labels.data(),
                                           smoothing, lse.data(), dloss.data(), dlogits.data());
      DeviceBuffer dlog = to_device(DType::f32, logits), ddl = to_device(DType::f32, dloss);
      DeviceBuffer dlab(DType::i64, n), dloss_out(DType::f32, n), dlse(DType::f32, n),
          dgrad(DType::f32, n * c);
      dlab.upload_raw(labels.data());
      dloss_out.poison();
      dlse.poison();
      dgrad.poison();
      kernels::cuda::cross_entropy_forward(gpu(), DType::f32, n, c, dlog.get(), dlab.as<int64_t>(),
                                           smoothing, dloss_out.get(), dlse.get());
      EXPECT_CLOSE(dloss_out.download(), loss, 1e-5);
      EXPECT_CLOSE(dlse.download(), lse, 1e-5);
      kernels::cuda::cross_entropy_backward(gpu(), DType::f32, n, c, dlog.get(), dlab.as<int64_t>(),
                                            smoothing, dlse.get(), ddl.get(), dgrad.get());
      EXPECT_CLOSE(dgrad.download(), dlogits, 1e-5);
    }
  }
}

// A masked class (a -inf logit): the unsmoothed loss stays finite, as on the CPU.
TEST(GpuLoss, AMinusInfinityLogitLeavesTheUnsmoothedLossFinite) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer dlog = to_device(DType::f32, {0.0f, -INFINITY, 1.0f});
  DeviceBuffer dlab(DType::i64, 1), dloss(DType::f32, 1), dlse(DType::f32, 1);
  const int64_t label = 0;
  dlab.upload_raw(&label);
  kernels::cuda::cross_entropy_forward(gpu(), DType::f32, 1, 3, dlog.get(), dlab.as<int64_t>(), 0.0,
                                       dloss.get(), dlse.get());
  EXPECT_NEAR(dloss.download()[0], 1.0 + std::log1p(std::exp(-1.0)), 1e-5);
}

TEST(GpuLoss, BadLabelGivesNanAndLowPrecisionLogitsThrow) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 2, c = 3;
  DeviceBuffer dlog = to_device(DType::f32, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
  DeviceBuffer dlab(DType::i64, n), dloss(DType::f32, n), dlse(DType::f32, n);
  std::vector<int64_t> labels = {1, 3};
  dlab.upload_raw(labels.data());
  kernels::cuda::cross_entropy_forward(gpu(), DType::f32, n, c, dlog.get(), dlab.as<int64_t>(), 0.0,
                                       dloss.get(), dlse.get());
  std::vector<float> loss = dloss.download();
  EXPECT_FALSE(std::isnan(loss[0]));
  EXPECT_TRUE(std::isnan(loss[1]));
  EXPECT_THROW(
      kernels::cuda::cross_entropy_forward(gpu(), DType::f16, n, c, dlog.get(), dlab.as<int64_t>(),
                                           0.0, dloss.get(), dlse.get()),
      Error);
}

TEST(GpuRandom, FillsAndDropoutMatchCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 100003;
  const uint64_t seed = 0x5eedull, offset = 12345;
  // The CPU computes in f32; 16-bit tensors are that value rounded (Note [CPU dtypes]).
  std::vector<float> uni(n), nor(n);
  kernels::cpu::fill_uniform(cpu(), DType::f32, n, uni.data(), seed, offset, -2.0, 3.0);
  kernels::cpu::fill_normal(cpu(), DType::f32, n, nor.data(), seed, offset, 0.5, 2.0);
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    auto rounded = [&](std::vector<float> v) {
      for (float& f : v) f = round_to(t, f);
      return v;
    };
    DeviceBuffer d(t, n);
    d.poison();
    kernels::cuda::fill_uniform(gpu(), t, n, d.get(), seed, offset, -2.0, 3.0);
    // A draw that rounds to hi in t is lo (Note [Uniform draws below hi]); f16 has some here.
    std::vector<float> uni_t = rounded(uni);
    int64_t at_hi = 0;
    for (float& f : uni_t) {
      if (f >= 3.0f) {
        f = round_to(t, -2.0f);
        ++at_hi;
      }
    }
    if (t == DType::f16) {
      EXPECT_GT(at_hi, 0) << "the draw no longer tests the rounding to hi";
    }
    EXPECT_EQ(d.download(), uni_t);
    // And the core's CPU draw of a 16-bit tensor (in f32, then rounded and checked) is the same.
    Generator gen(seed);
    gen.set_offset(offset);
    const std::vector<double> core = rand({n}, gen, {.dtype = t}, -2.0, 3.0).to_vector();
    EXPECT_EQ(std::vector<float>(core.begin(), core.end()), uni_t);
    d.poison();
    kernels::cuda::fill_normal(gpu(), t, n, d.get(), seed, offset, 0.5, 2.0);
    EXPECT_EQ(d.download(), rounded(nor));

    const double p = 0.3;
    auto x = random_values(static_cast<size_t>(n), 61, t);
    std::vector<float> y(n), gx(n);
    std::vector<uint8_t> mask(n), got_mask(n);
    kernels::cpu::dropout_forward(cpu(), DType::f32, n, x.data(), p, seed, offset, nullptr,
                                  y.data(), mask.data());
    kernels::cpu::dropout_backward(cpu(), DType::f32, n, x.data(), mask.data(), p, gx.data());
    DeviceBuffer dx = to_device(t, x), dy(t, n), dmask(DType::u8, n), dgx(t, n);
    dy.poison();
    dmask.poison();
    dgx.poison();
    kernels::cuda::dropout_forward(gpu(), t, n, dx.get(), p, seed, offset, nullptr, dy.get(),
                                   dmask.as<uint8_t>());
    kernels::cuda::dropout_backward(gpu(), t, n, dx.get(), dmask.as<uint8_t>(), p, dgx.get());
    dmask.download_raw(got_mask.data());
    EXPECT_EQ(got_mask, mask);
    // The offset split between the argument and a device counter (captured graphs): same mask.
    DeviceBuffer base(DType::i64, 1), dmask2(DType::u8, n);
    const uint64_t base_value = offset - 1;
    base.upload_raw(&base_value);
    dmask2.poison();
    kernels::cuda::dropout_forward(gpu(), t, n, dx.get(), p, seed, 1, base.as<uint64_t>(), dy.get(),
                                   dmask2.as<uint8_t>());
    dmask2.download_raw(got_mask.data());
    EXPECT_EQ(got_mask, mask);
    EXPECT_EQ(dy.download(), rounded(y));
    EXPECT_EQ(dgx.download(), rounded(gx));
    // Without a mask, and as the backward (nn::functional::dropout draws the mask again): the
    // same call on x gives dx = the mask-based backward of x.
    DeviceBuffer dgx2(t, n);
    dgx2.poison();
    kernels::cuda::dropout_forward(gpu(), t, n, dx.get(), p, seed, offset, nullptr, dgx2.get(),
                                   nullptr);
    EXPECT_EQ(dgx2.download(), dgx.download());
  }
}

// StochasticDepth on CUDA draws its row mask with the dropout kernel from the generator's draw():
// the CPU's mask from the same seed and offset, and drawable inside a graph capture (Note [Random
// draws in captured graphs]), where the host path's take() throws.
TEST(GpuRandom, StochasticDepthMatchesTheCpuAndDrawsInsideACapture) {
  SKIP_WITHOUT_GPU();
  const Device kGpu = Device::cuda(0);
  Generator data_gen(1);
  Tensor x = randn(Shape{48, 2, 2, 3}, data_gen);
  Generator cpu_gen(9);
  cpu_gen.set_offset(40);
  models::StochasticDepth on_cpu(0.25, cpu_gen);
  const std::vector<double> want = on_cpu.forward(x).to_vector();
  for (bool capturing : {false, true}) {
    SCOPED_TRACE(capturing ? "capturing" : "eager");
    Generator gen(9);
    gen.set_offset(40);
    models::StochasticDepth sd(0.25, gen);
    Tensor counter = full({1}, 40.0, {.dtype = DType::i64, .device = kGpu});
    if (capturing)
      gen.begin_graph_capture(reinterpret_cast<const uint64_t*>(counter.data<int64_t>()));
    std::vector<double> got;
    ASSERT_NO_THROW(got = sd.forward(x.to(kGpu)).to_vector());
    if (capturing) {
      EXPECT_EQ(gen.end_graph_capture(), 48u);
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6) << i;
  }
}

TEST(GpuOptim, SgdAndAdamWMatchCpuAndSkipOnInf) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 10007;
  auto p0 = random_values(n, 71, DType::f32);
  auto g = random_values(n, 72, DType::f32);
  auto m0 = random_values(n, 73, DType::f32);
  auto v0 = random_values(n, 74, DType::f32, 0, 1);
  DeviceBuffer dg = to_device(DType::f32, g);
  for (float inf_flag : {0.0f, 1.0f}) {
    DeviceBuffer dflag = to_device(DType::f32, {inf_flag});
    for (int variant = 0; variant < 3; ++variant) {
      kernels::SgdParams sp;
      sp.lr = 0.05, sp.momentum = 0.9, sp.weight_decay = 1e-3;
      sp.nesterov = variant == 1;
      sp.first_step = variant == 2;
      SCOPED_TRACE(detail::str("sgd variant ", variant, " found_inf ", inf_flag));
      std::vector<float> p = p0, m = m0;
      if (inf_flag == 0.0f) {
        kernels::cpu::sgd_step(cpu(), n, p.data(), g.data(), m.data(), sp, nullptr);
      }
      DeviceBuffer dp = to_device(DType::f32, p0), dm = to_device(DType::f32, m0);
      kernels::cuda::sgd_step(gpu(), n, dp.as<float>(), dg.as<float>(), dm.as<float>(), sp,
                              dflag.as<float>());
      EXPECT_CLOSE(dp.download(), p, 1e-6);
      EXPECT_CLOSE(dm.download(), m, 1e-6);
    }
    kernels::AdamWParams ap;
    ap.lr = 1e-2, ap.step = 3;
    SCOPED_TRACE(detail::str("adamw found_inf ", inf_flag));
    std::vector<float> p = p0, m = m0, v = v0;
    if (inf_flag == 0.0f) {
      kernels::cpu::adamw_step(cpu(), n, p.data(), g.data(), m.data(), v.data(), ap, nullptr);
    }
    DeviceBuffer dp = to_device(DType::f32, p0), dm = to_device(DType::f32, m0),
                 dv = to_device(DType::f32, v0);
    kernels::cuda::adamw_step(gpu(), n, dp.as<float>(), dg.as<float>(), dm.as<float>(),
                              dv.as<float>(), ap, dflag.as<float>());
    EXPECT_CLOSE(dp.download(), p, 1e-6);
    EXPECT_CLOSE(dm.download(), m, 1e-6);
    EXPECT_CLOSE(dv.download(), v, 1e-6);
  }
}

// The multi-tensor SGD that optim::SGD launches: 45 tensors (two launches, one of them empty),
// with and without momentum, first step, nesterov, and a set found_inf flag that skips all.
TEST(GpuOptim, SgdStepManyMatchesCpuAndSkipsOnInf) {
  SKIP_WITHOUT_GPU();
  for (float inf_flag : {0.0f, 1.0f}) {
    DeviceBuffer dflag = to_device(DType::f32, {inf_flag});
    DeviceBuffer dlr = to_device(DType::f32, {0.05f});
    for (int variant = 0; variant < 5; ++variant) {
      kernels::SgdParams sp;
      sp.lr = 0.05, sp.weight_decay = 1e-3;
      sp.momentum = variant == 3 ? 0.0 : 0.9;
      sp.nesterov = variant == 1;
      sp.first_step = variant == 2;
      SCOPED_TRACE(detail::str("variant ", variant, " found_inf ", inf_flag));
      std::vector<std::vector<float>> p, m;
      std::vector<DeviceBuffer> dp, dg, dm;
      std::vector<float*> pp, mp;
      std::vector<const float*> gp;
      std::vector<int64_t> sizes;
      for (int t = 0; t < 45; ++t) {
        const int64_t n = t == 3 ? 0 : 1 + (t * 7919) % 20011;
        auto p0 = random_values(static_cast<size_t>(n), 300 + t, DType::f32);
        auto g = random_values(static_cast<size_t>(n), 400 + t, DType::f32);
        auto m0 = random_values(static_cast<size_t>(n), 500 + t, DType::f32);
        dp.push_back(to_device(DType::f32, p0));
        dg.push_back(to_device(DType::f32, g));
        dm.push_back(to_device(DType::f32, m0));
        if (inf_flag == 0.0f) {
          kernels::cpu::sgd_step(cpu(), n, p0.data(), g.data(),
                                 sp.momentum != 0 ? m0.data() : nullptr, sp, nullptr);
        }
        p.push_back(std::move(p0));
        m.push_back(std::move(m0));
        sizes.push_back(n);
      }
      for (size_t t = 0; t < dp.size(); ++t) {
        pp.push_back(dp[t].as<float>());
        gp.push_back(dg[t].as<float>());
        mp.push_back(dm[t].as<float>());
      }
      // Variant 4: the learning rate read from the device, the by-value one deliberately wrong.
      kernels::SgdParams gpu_sp = sp;
      if (variant == 4) gpu_sp.lr = 99.0, gpu_sp.lr_device = dlr.as<float>();
      kernels::cuda::sgd_step_many(gpu(), static_cast<int64_t>(pp.size()), pp.data(), gp.data(),
                                   sp.momentum != 0 ? mp.data() : nullptr, sizes.data(), gpu_sp,
                                   dflag.as<float>());
      for (size_t t = 0; t < dp.size(); ++t) {
        EXPECT_CLOSE(dp[t].download(), p[t], 1e-6);
        EXPECT_CLOSE(dm[t].download(), m[t], 1e-6);
      }
    }
  }
}

// The scaler's flag on another device than a parameter is refused before the first update: a
// step that throws at the second parameter would leave the first one moved and its count
// advanced.
TEST(GpuOptim, AFoundInfFlagOnAnotherDeviceThanAParameterChangesNothing) {
  SKIP_WITHOUT_GPU();
  Tensor on_gpu = full({4}, 1.0, {.device = Device::cuda(0), .requires_grad = true});
  Tensor on_cpu = full({4}, 1.0, {.requires_grad = true});
  optim::AdamW opt({on_gpu, on_cpu}, {.lr = 0.1});
  on_gpu.set_grad(full({4}, 0.5, {.device = Device::cuda(0)}));
  on_cpu.set_grad(full({4}, 0.5));
  opt.set_found_inf(full({}, 0.0, {.device = Device::cuda(0)}));
  EXPECT_THROW(opt.step(), Error);
  EXPECT_EQ(on_gpu.to_vector(), std::vector<double>(4, 1.0));
  EXPECT_TRUE(opt.state_tensors().empty()) << "no parameter has state yet";
}
