// kernels/cpu/onednn_gemm.h: oneDNN's products against a double reference, for every layout
// the callers use (transposed operands, leading dimensions wider than a row), with bias and
// accumulation, in f32 and bf16. Skipped where frugal was built without oneDNN or oneDNN has
// no fast bf16 kernels (the callers then keep their Eigen paths, tested by their own tests).
#include "kernels/cpu/onednn_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/half.h"
#include "kernels/kernel_test_util.h"

namespace frugal::test {
namespace {

using kernels::cpu::GemmOperand;
using kernels::cpu::onednn_gemm;

// A rows x cols operand stored row-major with leading dimension cols + 3 (or transposed:
// stored [cols, rows] with ld rows + 3), values from a seed, kept as f32 and as bf16 bits.
struct Operand {
  int64_t rows, cols, ld;
  bool transposed;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  Operand(int64_t r, int64_t c, bool t, uint32_t seed)
      : rows(r), cols(c), ld((t ? r : c) + 3), transposed(t) {
    const int64_t stored_rows = t ? c : r;
    auto v = random_values(stored_rows * ld, seed);
    for (double x : v) {
      // bf16-exact values, so both dtypes multiply the same numbers
      uint16_t h = float_to_bf16(static_cast<float>(x));
      bf16.push_back(h);
      f32.push_back(bf16_to_float(h));
    }
  }
  double at(int64_t i, int64_t j) const {
    return f32[static_cast<size_t>(transposed ? j * ld + i : i * ld + j)];
  }
  GemmOperand as(DType dt) const {
    return {dt == DType::f32 ? static_cast<const void*>(f32.data()) : bf16.data(), dt, ld,
            transposed};
  }
};

struct Case {
  int64_t m, n, k;
  bool ta, tb, bias, accumulate;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int shape = 0; shape < 2; ++shape) {
    for (int bits = 0; bits < 16; ++bits) {
      out.push_back({shape == 0 ? 37 : 300, shape == 0 ? 19 : 24, shape == 0 ? 23 : 96,
                     (bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0, (bits & 8) != 0});
    }
  }
  return out;
}

// Runs one case with inputs in `in` and the output in `out`; false when oneDNN declined.
// Compares each element with the double reference within `rel` of the sum of |terms|.
bool check(const Case& cs, DType in, DType out, double rel) {
  Operand a(cs.m, cs.k, cs.ta, 1), b(cs.k, cs.n, cs.tb, 2);
  std::vector<float> bias;
  for (double x : random_values(cs.n, 3)) bias.push_back(static_cast<float>(x));
  const int64_t ldc = cs.n + 5;
  std::vector<double> before = random_values(cs.m * ldc, 4);
  std::vector<float> c32(before.begin(), before.end());
  std::vector<uint16_t> c16;
  for (double x : before) c16.push_back(float_to_bf16(static_cast<float>(x)));
  void* c = out == DType::f32 ? static_cast<void*>(c32.data()) : c16.data();
  if (!onednn_gemm(cpu_ctx(), cs.m, cs.n, cs.k, a.as(in), b.as(in), c, out, ldc,
                   cs.bias ? bias.data() : nullptr, cs.accumulate)) {
    return false;
  }
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t q = static_cast<size_t>(i * ldc + j);
      const double got = out == DType::f32 ? c32[q] : bf16_to_float(c16[q]);
      const double old = out == DType::f32
                             ? static_cast<double>(static_cast<float>(before[q]))
                             : bf16_to_float(float_to_bf16(static_cast<float>(before[q])));
      if (j >= cs.n) {  // past the row: untouched
        EXPECT_EQ(got, old) << "wrote past column " << cs.n << " at (" << i << ", " << j << ")";
        continue;
      }
      double want = cs.accumulate ? old : 0.0, scale = std::abs(want);
      for (int64_t p = 0; p < cs.k; ++p) {
        want += a.at(i, p) * b.at(p, j);
        scale += std::abs(a.at(i, p) * b.at(p, j));
      }
      if (cs.bias) {
        want += bias[static_cast<size_t>(j)];
        scale += std::abs(bias[static_cast<size_t>(j)]);
      }
      EXPECT_NEAR(got, want, rel * scale + 1e-30)
          << "m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " ta=" << cs.ta << " tb=" << cs.tb
          << " bias=" << cs.bias << " accumulate=" << cs.accumulate << " at (" << i << ", " << j
          << ")";
    }
  }
  return true;
}

TEST(OnednnGemm, F32MatchesADoubleReferenceForEveryLayoutWithBiasAndAccumulation) {
  for (const Case& cs : cases()) {
    if (!check(cs, DType::f32, DType::f32, 1e-6)) {
      GTEST_SKIP() << "frugal built without oneDNN (or FRUGAL_ONEDNN=0): Eigen runs the GEMMs";
    }
  }
}

TEST(OnednnGemm, Bf16InputsRoundOnceIntoBf16OrStayF32) {
  for (const Case& cs : cases()) {
    // bf16 output: one rounding (2^-8 relative) of an f32 sum; f32 output: the f32 sum itself
    if (!check(cs, DType::bf16, DType::bf16, 1.0 / 256 + 1e-6)) {
      GTEST_SKIP() << "no fast bf16 GEMM from oneDNN on this CPU (it needs AVX512-BF16)";
    }
    ASSERT_TRUE(check(cs, DType::bf16, DType::f32, 1e-6));
  }
}

TEST(OnednnGemm, DeclinesWhatItDoesNotComputeAndTouchesNothing) {
  std::vector<double> a(6, 1.0), b(6, 1.0), c(4, 7.0);
  EXPECT_FALSE(onednn_gemm(cpu_ctx(), 2, 2, 3, {a.data(), DType::f64, 3}, {b.data(), DType::f64, 2},
                           c.data(), DType::f64, 2));
  EXPECT_FALSE(onednn_gemm(cpu_ctx(), 2, 2, 0, {a.data(), DType::f32, 3}, {b.data(), DType::f32, 2},
                           c.data(), DType::f32, 2));
  for (double v : c) EXPECT_EQ(v, 7.0);
}

}  // namespace
}  // namespace frugal::test
