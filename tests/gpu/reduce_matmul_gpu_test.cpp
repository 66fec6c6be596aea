// CUDA vs CPU: sum_to over every pattern of reduced dimensions (including the split paths of
// long columns and rows), argmax by rows, and gemm in all transpose combinations with beta 0/1.
#include "gpu_test_util.h"
#include "kernels/matmul.h"
#include "kernels/reduce.h"

using namespace frugal;
using namespace frugal::gputest;

TEST(GpuReduce, SumToMatchesCpu) {
  SKIP_WITHOUT_GPU();
  struct Case {
    Shape in, out;
  };
  std::vector<Case> cases = {
      {{4, 5, 6, 7}, {1, 5, 1, 7}},
      {{4, 5, 6, 7}, {4, 1, 6, 1}},
      {{4, 5, 6, 7}, {1, 1, 1, 7}},
      {{4, 5, 6, 7}, {4, 5, 6, 1}},
      {{4, 5, 6, 7}, {1, 1, 1, 1}},
      {{4, 5, 6, 7}, {4, 5, 6, 7}},
      {{5003, 3}, {1, 3}},
      {{3, 5003}, {3, 1}},
      {{61, 1, 67}, {1, 1, 67}},
      // Middle sums (Note [Middle sums]): packed, split over blocks, one outer index
      {{4, 5, 6, 16}, {4, 1, 1, 16}},
      {{3, 12544, 32}, {3, 1, 32}},
      {{1024, 40}, {1, 40}},
      {{2, 49, 1152}, {2, 1, 1152}}};
  for (DType t : kDTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(detail::str(dtype_name(t), " ", c.in, " -> ", c.out));
      auto x = random_values(static_cast<size_t>(c.in.numel()), 7, t);
      kernels::Reduction r = kernels::make_reduction(c.in, c.out);
      std::vector<float> ref(static_cast<size_t>(c.out.numel()));
      kernels::cpu::sum_to(cpu(), DType::f32, r, x.data(), 0.5, ref.data());
      DeviceBuffer dx = to_device(t, x), dy(t, c.out.numel());
      dy.poison();
      kernels::cuda::sum_to(gpu(), t, r, dx.get(), 0.5, dy.get());
      EXPECT_CLOSE(dy.download(), ref, tolerance(t));
    }
  }
}

TEST(GpuReduce, ArgmaxRowsMatchesCpuExactly) {
  SKIP_WITHOUT_GPU();
  for (DType t : kDTypes) {
    for (int64_t cols : {3, 10, 1000}) {
      SCOPED_TRACE(detail::str(dtype_name(t), " cols ", cols));
      const int64_t rows = 37;
      auto x = random_values(static_cast<size_t>(rows * cols), 8, t);
      std::vector<int64_t> ref(rows), got(rows);
      kernels::cpu::argmax_rows(cpu(), DType::f32, rows, cols, x.data(), ref.data());
      DeviceBuffer dx = to_device(t, x), dout(DType::i64, rows);
      dout.poison();
      kernels::cuda::argmax_rows(gpu(), t, rows, cols, dx.get(), dout.as<int64_t>());
      dout.download_raw(got.data());
      EXPECT_EQ(got, ref);
    }
  }
}

TEST(GpuMatmul, GemmMatchesCpu) {
  SKIP_WITHOUT_GPU();
  struct Size {
    int64_t m, n, k;
  };
  for (DType t : kDTypes) {
    for (Size sz : {Size{37, 29, 53}, Size{1, 7, 300}, Size{64, 48, 96}}) {
      for (int ta = 0; ta < 2; ++ta) {
        for (int tb = 0; tb < 2; ++tb) {
          for (double beta : {0.0, 1.0}) {
            SCOPED_TRACE(detail::str(dtype_name(t), " m", sz.m, " n", sz.n, " k", sz.k, " ta", ta,
                                     " tb", tb, " beta", beta));
            auto a = random_values(static_cast<size_t>(sz.m * sz.k), 9, t);
            auto b = random_values(static_cast<size_t>(sz.k * sz.n), 10, t);
            auto c0 = random_values(static_cast<size_t>(sz.m * sz.n), 11, t);
            std::vector<float> ref = c0;
            kernels::cpu::gemm(cpu(), DType::f32, ta, tb, sz.m, sz.n, sz.k, a.data(), b.data(),
                               beta, ref.data());
            DeviceBuffer da = to_device(t, a), db = to_device(t, b), dc(t, sz.m * sz.n);
            if (beta == 0.0) {
              dc.poison();  // beta 0 must never read c
            } else {
              dc.upload(c0);
            }
            kernels::cuda::gemm(gpu(), t, ta, tb, sz.m, sz.n, sz.k, da.get(), db.get(), beta,
                                dc.get());
            EXPECT_CLOSE(dc.download(), ref, tolerance(t));
          }
        }
      }
    }
  }
}
