// CUDA vs CPU: batch norm (training forward with running statistics, evaluation, backward, the
// residual sum of an unwritten output) and max/average/global-average pooling in both
// directions, on odd NHWC sizes.
#include <cmath>

#include "gpu_test_util.h"
#include "kernels/batch_norm.h"
#include "kernels/pooling.h"

using namespace frugal;
using namespace frugal::gputest;

TEST(GpuBatchNorm, TrainEvalBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  struct Size {
    int64_t rows, c;
  };
  const double eps = 1e-5, momentum = 0.1;
  for (DType t : kDTypes) {
    // {4099, 32}, {33, 24}, {517, 12} run on channel packs (16-bit: 4 channels a thread, Note
    // [Narrow packs for small reductions]); {280001, 32} fills the device with 16-byte packs;
    // {41, 1280} has 160 16-bit packs a row (blocks of 160 threads) and {300, 2056} more than a
    // block's 256 (Note [Row-major elementwise passes]); the partial sums take it in 9 columns of
    // at most 256 channels, and {3, 700001} (one channel a thread) in 2,735.
    for (Size sz :
         {Size{70, 13}, Size{3001, 37}, Size{2, 5}, Size{4099, 32}, Size{33, 24}, Size{517, 12},
          Size{280001, 32}, Size{41, 1280}, Size{300, 2056}, Size{3, 700001}}) {
      SCOPED_TRACE(detail::str(dtype_name(t), " rows ", sz.rows, " c ", sz.c));
      const int64_t n = sz.rows * sz.c;
      const auto c = static_cast<size_t>(sz.c);
      auto x = random_values(static_cast<size_t>(n), 31, t, 2, 4);  // mean far from 0
      auto dy = random_values(static_cast<size_t>(n), 32, t);
      auto gamma = random_values(c, 33, DType::f32, 0.5, 1.5);
      auto beta = random_values(c, 34, DType::f32);
      auto rm0 = random_values(c, 35, DType::f32);
      auto rv0 = random_values(c, 36, DType::f32, 0.5, 2);
      // CPU reference in f32 on the same rounded values.
      std::vector<float> y(n), mean(c), invstd(c), rm = rm0, rv = rv0;
      kernels::cpu::batch_norm_forward_train(cpu(), DType::f32, sz.rows, sz.c, x.data(),
                                             gamma.data(), beta.data(), eps, momentum, y.data(),
                                             mean.data(), invstd.data(), rm.data(), rv.data());
      DeviceBuffer dx = to_device(t, x), ddy = to_device(t, dy);
      DeviceBuffer dg = to_device(DType::f32, gamma), db = to_device(DType::f32, beta);
      DeviceBuffer drm = to_device(DType::f32, rm0), drv = to_device(DType::f32, rv0);
      DeviceBuffer dy_out(t, n), dmean(DType::f32, sz.c), dinv(DType::f32, sz.c);
      dy_out.poison();
      dmean.poison();
      dinv.poison();
      kernels::cuda::batch_norm_forward_train(gpu(), t, sz.rows, sz.c, dx.get(), dg.get(), db.get(),
                                              eps, momentum, dy_out.get(), dmean.get(), dinv.get(),
                                              drm.get(), drv.get());
      EXPECT_CLOSE(dy_out.download(), y, tolerance(t));
      EXPECT_CLOSE(dmean.download(), mean, 1e-5);
      EXPECT_CLOSE(dinv.download(), invstd, 1e-4);
      EXPECT_CLOSE(drm.download(), rm, 1e-5);
      EXPECT_CLOSE(drv.download(), rv, 1e-4);

      std::vector<float> y_eval(n);
      kernels::cpu::batch_norm_forward_eval(cpu(), DType::f32, sz.rows, sz.c, x.data(),
                                            gamma.data(), beta.data(), rm0.data(), rv0.data(), eps,
                                            y_eval.data());
      DeviceBuffer drm0 = to_device(DType::f32, rm0), drv0 = to_device(DType::f32, rv0);
      dy_out.poison();
      kernels::cuda::batch_norm_forward_eval(gpu(), t, sz.rows, sz.c, dx.get(), dg.get(), db.get(),
                                             drm0.get(), drv0.get(), eps, dy_out.get());
      EXPECT_CLOSE(dy_out.download(), y_eval, tolerance(t));

      std::vector<float> gx(n), ggamma(c), gbeta(c);
      kernels::cpu::batch_norm_backward(cpu(), DType::f32, sz.rows, sz.c, x.data(), dy.data(),
                                        gamma.data(), mean.data(), invstd.data(), gx.data(),
                                        ggamma.data(), gbeta.data());
      DeviceBuffer dgx(t, n), dgg(DType::f32, sz.c), dgb(DType::f32, sz.c);
      DeviceBuffer dmean_ref = to_device(DType::f32, mean),
                   dinv_ref = to_device(DType::f32, invstd);
      dgx.poison();
      dgg.poison();
      dgb.poison();
      kernels::cuda::batch_norm_backward(gpu(), t, sz.rows, sz.c, dx.get(), ddy.get(), dg.get(),
                                         dmean_ref.get(), dinv_ref.get(), dgx.get(), dgg.get(),
                                         dgb.get());
      // dx cancels two sums of similar size, so it loses a little more than y.
      EXPECT_CLOSE(dgx.download(), gx, t == DType::f32 ? 1e-4 : tolerance(t));
      EXPECT_CLOSE(dgg.download(), ggamma, 1e-4);
      EXPECT_CLOSE(dgb.download(), gbeta, 1e-5);
    }
  }
}

// Note [Batch norm with its activation]: the fused kernels against the CPU's, and the recompute
// equal to the forward bit for bit. The CPU reference takes the GPU's saved statistics, so both
// sides evaluate the activation's derivative at the same pre-activation values (a value within
// rounding of a kink could otherwise take the other side); the data are fixed by their seeds.
TEST(GpuBatchNorm, FusedActivationMatchesCpuAndRecomputesExactly) {
  SKIP_WITHOUT_GPU();
  using kernels::Activation;
  struct Size {
    int64_t rows, c;
  };
  const double eps = 1e-5, momentum = 0.1;
  for (int a = 0; a < kernels::kNumActivations; ++a) {
    const auto act = static_cast<Activation>(a);
    for (DType t : kDTypes) {
      // {200003, 64}: wide 16-bit packs, the passes' grids filling the device with each
      // activation's own kernel (Note [Grids by occupancy] in kernels/cuda/batch_norm.cu) and
      // several rows a thread walked down and up (Note [Sums downward, elementwise upward])
      for (Size sz : {Size{70, 13}, Size{3001, 37}, Size{2, 5}, Size{4099, 32}, Size{517, 12},
                      Size{300, 2056}, Size{200003, 64}}) {
        SCOPED_TRACE(
            detail::str("activation ", a, " ", dtype_name(t), " rows ", sz.rows, " c ", sz.c));
        const int64_t n = sz.rows * sz.c;
        const auto c = static_cast<size_t>(sz.c);
        auto x = random_values(static_cast<size_t>(n), 41, t, -1, 3);
        auto dy = random_values(static_cast<size_t>(n), 42, t);
        auto gamma = random_values(c, 43, DType::f32, 1, 4);  // spreads u over every kink
        auto beta = random_values(c, 44, DType::f32, -1, 4);
        DeviceBuffer dx = to_device(t, x), ddy = to_device(t, dy);
        DeviceBuffer dg = to_device(DType::f32, gamma), db = to_device(DType::f32, beta);
        DeviceBuffer dy_out(t, n), dmean(DType::f32, sz.c), dinv(DType::f32, sz.c);
        dy_out.poison();
        DeviceBuffer batches(DType::i64, 1);  // num_batches_tracked, counted in the finish
        const int64_t batches_before = 41;
        batches.upload_raw(&batches_before);
        kernels::cuda::batch_norm_act_forward_train(
            gpu(), t, act, sz.rows, sz.c, dx.get(), dg.get(), db.get(), eps, momentum, dy_out.get(),
            dmean.get(), dinv.get(), nullptr, nullptr, batches.as<int64_t>());
        int64_t batches_after = 0;
        batches.download_raw(&batches_after);
        EXPECT_EQ(batches_after, 42) << "one batch counted, once";
        std::vector<float> mean = dmean.download(), invstd = dinv.download();
        std::vector<float> y(n);
        kernels::cpu::batch_norm_act_apply(cpu(), DType::f32, act, sz.rows, sz.c, x.data(),
                                           gamma.data(), beta.data(), mean.data(), invstd.data(),
                                           y.data());
        std::vector<float> y_gpu = dy_out.download();
        EXPECT_CLOSE(y_gpu, y, tolerance(t));

        DeviceBuffer again(t, n);
        again.poison();
        kernels::cuda::batch_norm_act_apply(gpu(), t, act, sz.rows, sz.c, dx.get(), dg.get(),
                                            db.get(), dmean.get(), dinv.get(), again.get());
        EXPECT_EQ(again.download(), y_gpu) << "the recompute must equal the forward exactly";

        // A residual add of the unwritten output (Note [Residual sums of deferred batch norms]):
        // bit for bit the add of the written one, and the CPU's sum within rounding.
        auto residual = random_values(static_cast<size_t>(n), 45, t, -2, 2);
        DeviceBuffer dres = to_device(t, residual), sum(t, n), sum_of_written(t, n);
        sum.poison();
        kernels::cuda::batch_norm_act_apply_add(gpu(), t, act, sz.rows, sz.c, dx.get(), dg.get(),
                                                db.get(), dmean.get(), dinv.get(), dres.get(),
                                                sum.get());
        kernels::cuda::binary(gpu(), kernels::BinaryOp::add, t,
                              kernels::make_broadcast(Shape{n}, Shape{n}, Shape{n}), dres.get(),
                              again.get(), sum_of_written.get());
        EXPECT_EQ(sum.download(), sum_of_written.download());
        std::vector<float> sum_cpu(n);
        kernels::cpu::batch_norm_act_apply_add(cpu(), DType::f32, act, sz.rows, sz.c, x.data(),
                                               gamma.data(), beta.data(), mean.data(),
                                               invstd.data(), residual.data(), sum_cpu.data());
        EXPECT_CLOSE(sum.download(), sum_cpu, 2 * tolerance(t));

        std::vector<float> gx(n), ggamma(c), gbeta(c);
        kernels::cpu::batch_norm_act_backward(
            cpu(), DType::f32, act, sz.rows, sz.c, x.data(), dy.data(), gamma.data(), beta.data(),
            mean.data(), invstd.data(), gx.data(), ggamma.data(), gbeta.data());
        DeviceBuffer dgx(t, n), dgg(DType::f32, sz.c), dgb(DType::f32, sz.c);
        dgx.poison();
        kernels::cuda::batch_norm_act_backward(gpu(), t, act, sz.rows, sz.c, dx.get(), ddy.get(),
                                               dg.get(), db.get(), dmean.get(), dinv.get(),
                                               dgx.get(), dgg.get(), dgb.get());
        // With two rows dx is a difference of two nearly equal terms (the normalised values are
        // +-1), so f32 keeps fewer digits of it than of larger batches.
        const double dx_tol = t == DType::f32 ? (sz.rows > 2 ? 1e-4 : 1e-3) : tolerance(t);
        EXPECT_CLOSE(dgx.download(), gx, dx_tol);
        EXPECT_CLOSE(dgg.download(), ggamma, 1e-4);
        EXPECT_CLOSE(dgb.download(), gbeta, 1e-4);

        // Written over dy (what the autograd op does when it owns the incoming gradient).
        kernels::cuda::batch_norm_act_backward(gpu(), t, act, sz.rows, sz.c, dx.get(), ddy.get(),
                                               dg.get(), db.get(), dmean.get(), dinv.get(),
                                               ddy.get(), dgg.get(), dgb.get());
        EXPECT_EQ(ddy.download(), dgx.download()) << "in place must equal out of place";
      }
    }
  }
}

// The backward's first pass records each window's first maximum in one byte (two past 254
// positions): ties go to the first in scan order, NaN wins, as on the CPU. 3 channels take one
// a thread, 16 and 40 take 16-byte packs (Note [Pool index math]).
TEST(GpuPooling, MaxBackwardMatchesTheCpuOnTiesNaNsAndWideWindows) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t h, w, k, stride, pad, c;
  };
  for (DType t : kDTypes) {
    for (Case pc :
         {Case{9, 7, 3, 2, 1, 3}, Case{8, 8, 3, 1, 1, 3}, Case{20, 18, 16, 2, 0, 3},
          Case{9, 7, 3, 2, 1, 16}, Case{11, 10, 3, 2, 1, 40}, Case{20, 18, 16, 2, 0, 16}}) {
      kernels::Pool2dShape s;
      s.n = 2, s.h = pc.h, s.w = pc.w, s.c = pc.c, s.kh = s.kw = pc.k;
      s.stride_h = s.stride_w = pc.stride, s.pad_h = s.pad_w = pc.pad;
      SCOPED_TRACE(detail::str(dtype_name(t), " ", pc.h, "x", pc.w, " k", pc.k, " c", pc.c));
      const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.c;
      auto x = random_values(static_cast<size_t>(nx), 45, t);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = x[i] > 0 ? 1.0f : 0.0f;  // mostly ties
        if (i % 37 == 5) x[i] = std::nanf("");
      }
      auto dy = random_values(static_cast<size_t>(ny), 46, t);
      DeviceBuffer dx = to_device(t, x), ddy = to_device(t, dy), dx_out(t, nx);
      std::vector<float> ref_dx(nx);
      kernels::cpu::max_pool2d_backward(cpu(), DType::f32, s, x.data(), dy.data(), ref_dx.data());
      dx_out.poison();
      kernels::cuda::max_pool2d_backward(gpu(), t, s, dx.get(), ddy.get(), dx_out.get());
      EXPECT_CLOSE(dx_out.download(), ref_dx, tolerance(t));
    }
  }
}

TEST(GpuPooling, MaxAvgGlobalMatchCpu) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t k, stride, pad;
    bool include_pad;
    int64_t c;  // 24: max pooling on 16-byte packs
  };
  for (DType t : kDTypes) {
    for (Case pc : {Case{3, 2, 1, true, 5}, Case{2, 2, 0, true, 5}, Case{3, 1, 1, false, 5},
                    Case{3, 2, 1, false, 5}, Case{3, 2, 1, true, 24}, Case{2, 2, 0, false, 24}}) {
      kernels::Pool2dShape s;
      s.n = 2, s.h = 9, s.w = 7, s.c = pc.c, s.kh = s.kw = pc.k,
      s.stride_h = s.stride_w = pc.stride;
      s.pad_h = s.pad_w = pc.pad;
      s.count_include_pad = pc.include_pad;
      SCOPED_TRACE(detail::str(dtype_name(t), " k", pc.k, " s", pc.stride, " p", pc.pad,
                               " include_pad ", pc.include_pad, " c", pc.c));
      int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.c;
      auto x = random_values(static_cast<size_t>(nx), 41, t);
      auto dy = random_values(static_cast<size_t>(ny), 42, t);
      DeviceBuffer dx = to_device(t, x), ddy = to_device(t, dy), dy_out(t, ny), dx_out(t, nx);
      std::vector<float> ref_y(ny), ref_dx(nx);

      kernels::cpu::max_pool2d_forward(cpu(), DType::f32, s, x.data(), ref_y.data());
      dy_out.poison();
      kernels::cuda::max_pool2d_forward(gpu(), t, s, dx.get(), dy_out.get());
      EXPECT_CLOSE(dy_out.download(), ref_y, tolerance(t));
      kernels::cpu::max_pool2d_backward(cpu(), DType::f32, s, x.data(), dy.data(), ref_dx.data());
      dx_out.poison();
      kernels::cuda::max_pool2d_backward(gpu(), t, s, dx.get(), ddy.get(), dx_out.get());
      EXPECT_CLOSE(dx_out.download(), ref_dx, tolerance(t));

      kernels::cpu::avg_pool2d_forward(cpu(), DType::f32, s, x.data(), ref_y.data());
      dy_out.poison();
      kernels::cuda::avg_pool2d_forward(gpu(), t, s, dx.get(), dy_out.get());
      EXPECT_CLOSE(dy_out.download(), ref_y, tolerance(t));
      kernels::cpu::avg_pool2d_backward(cpu(), DType::f32, s, dy.data(), ref_dx.data());
      dx_out.poison();
      kernels::cuda::avg_pool2d_backward(gpu(), t, s, ddy.get(), dx_out.get());
      EXPECT_CLOSE(dx_out.download(), ref_dx, tolerance(t));
    }
    // c = 37: one channel a thread; c = 32: packs, and a long H x W split over blocks.
    for (auto [hw, c] : {std::pair<int64_t, int64_t>{49, 37}, {3136, 32}}) {
      SCOPED_TRACE(detail::str(dtype_name(t), " global ", hw, "x", c));
      const int64_t n = 3;
      auto x = random_values(static_cast<size_t>(n * hw * c), 43, t);
      auto dy = random_values(static_cast<size_t>(n * c), 44, t);
      std::vector<float> ref_y(n * c), ref_dx(n * hw * c);
      kernels::cpu::global_avg_pool_forward(cpu(), DType::f32, n, hw, c, x.data(), ref_y.data());
      kernels::cpu::global_avg_pool_backward(cpu(), DType::f32, n, hw, c, dy.data(), ref_dx.data());
      DeviceBuffer dx = to_device(t, x), ddy = to_device(t, dy), dy_out(t, n * c),
                   dx_out(t, n * hw * c);
      dy_out.poison();
      dx_out.poison();
      kernels::cuda::global_avg_pool_forward(gpu(), t, n, hw, c, dx.get(), dy_out.get());
      kernels::cuda::global_avg_pool_backward(gpu(), t, n, hw, c, ddy.get(), dx_out.get());
      EXPECT_CLOSE(dy_out.download(), ref_y, tolerance(t));
      EXPECT_CLOSE(dx_out.download(), ref_dx, tolerance(t));
    }
  }
}
