// Casts: the F16C bulk path against base/half.h bit for bit, round trips, round-to-nearest-even
// at ties, and every dtype pair through a reference conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/half.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_test_util.h"

using namespace frugal;
using namespace frugal::test;

namespace {

// Mixed magnitudes: normal f16 range, subnormals, overflow, and the specials.
std::vector<float> wide_floats(int64_t n) {
  auto v = random_values(n, 31, -1.0, 1.0);
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double mag = std::pow(2.0, static_cast<double>(static_cast<int64_t>(i % 48)) - 30);
    out[i] = static_cast<float>(v[i] * mag);  // 2^-30 .. 2^17
  }
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 65504.0f, 65519.0f, 65520.0f,
                            5.9604645e-08f, 2.9802322e-08f, 8.940697e-08f, 1.0f + 0.00048828125f,
                            1.0f + 3 * 0.00048828125f};
  for (size_t i = 0; i < std::size(specials) && i * 3 < out.size(); ++i) out[i * 3] = specials[i];
  return out;
}

}  // namespace

TEST(Cast, F32ToF16MatchesScalarBitForBit) {
  for (int64_t n : {1, 7, 8, 9, 100003}) {
    auto x = wide_floats(n);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    kernels::cast(cpu_ctx(), DType::f32, DType::f16, n, x.data(), h.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[static_cast<size_t>(i)], float_to_f16(x[static_cast<size_t>(i)]))
          << "x=" << x[static_cast<size_t>(i)] << " n=" << n;
    }
    std::vector<float> back(static_cast<size_t>(n));
    kernels::cast(cpu_ctx(), DType::f16, DType::f32, n, h.data(), back.data());
    for (int64_t i = 0; i < n; ++i) {
      float want = f16_to_float(h[static_cast<size_t>(i)]);
      ASSERT_EQ(float_bits(back[static_cast<size_t>(i)]), float_bits(want)) << i;
    }
  }
}

TEST(Cast, NaNStaysNaNAndTiesRoundToEven) {
  std::vector<float> x{std::nanf(""), 1.0f + 0.00048828125f, 1.0f + 3 * 0.00048828125f,
                       3.0f + 1.0f / 128, 3.0f + 3.0f / 128, 2049.0f, 2051.0f, -0.1f, 1e-9f};
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> h(x.size()), b(x.size());
  std::vector<float> fh(x.size()), fb(x.size());
  kernels::cast(cpu_ctx(), DType::f32, DType::f16, n, x.data(), h.data());
  kernels::cast(cpu_ctx(), DType::f32, DType::bf16, n, x.data(), b.data());
  kernels::cast(cpu_ctx(), DType::f16, DType::f32, n, h.data(), fh.data());
  kernels::cast(cpu_ctx(), DType::bf16, DType::f32, n, b.data(), fb.data());
  EXPECT_TRUE(std::isnan(fh[0]));
  EXPECT_TRUE(std::isnan(fb[0]));
  EXPECT_EQ(fh[1], 1.0f);                       // tie between 1 and 1 + 2^-10: even is 1
  EXPECT_EQ(fh[2], 1.0f + 4 * 0.00048828125f);  // tie: even is up
  EXPECT_EQ(fb[3], 3.0f);                       // bf16 tie down to even
  EXPECT_EQ(fb[4], 3.0f + 4.0f / 128);          // bf16 tie up to even
  EXPECT_EQ(fh[5], 2048.0f);                    // f16 spacing 2 above 2048: 2049 ties to 2048
  EXPECT_EQ(fh[6], 2052.0f);
  EXPECT_NEAR(fh[7], -0.1, 0.1 * 1e-3);
  EXPECT_EQ(fh[8], 0.0f);  // below half the smallest subnormal
}

TEST(Cast, EveryFloatPairMatchesReference) {
  const DType floats[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
  const int64_t n = 1031;
  auto v = random_values(n, 32, -300.0, 300.0);
  // The source holds v rounded to its dtype; reference: load as double, round to the target
  // through float (16-bit targets) or directly.
  auto store = [](DType t, double d, void* p, int64_t i) {
    switch (t) {
      case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(d); break;
      case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_f16(static_cast<float>(d)); break;
      case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(d)); break;
      case DType::f64: static_cast<double*>(p)[i] = d; break;
      default: break;
    }
  };
  for (DType from : floats) {
    std::vector<uint64_t> src(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) store(from, v[static_cast<size_t>(i)], src.data(), i);
    for (DType to : floats) {
      std::vector<uint64_t> got(static_cast<size_t>(n), 0), want(static_cast<size_t>(n), 0);
      kernels::cast(cpu_ctx(), from, to, n, src.data(), got.data());
      for (int64_t i = 0; i < n; ++i) {
        double d = 0;
        switch (from) {
          case DType::f32: d = reinterpret_cast<float*>(src.data())[i]; break;
          case DType::f16: d = f16_to_float(reinterpret_cast<uint16_t*>(src.data())[i]); break;
          case DType::bf16: d = bf16_to_float(reinterpret_cast<uint16_t*>(src.data())[i]); break;
          case DType::f64: d = reinterpret_cast<double*>(src.data())[i]; break;
          default: break;
        }
        store(to, d, want.data(), i);
      }
      ASSERT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(n) * dtype_size(to)), 0)
          << from << " -> " << to;
    }
  }
}

TEST(Cast, RoundTripsAreExactWhereRepresentable) {
  // f16 -> f32 -> f16 and bf16 -> f64 -> bf16 are exact for every finite 16-bit pattern.
  std::vector<uint16_t> all;
  for (uint32_t b = 0; b < 65536; ++b) {
    if (std::isfinite(f16_to_float(static_cast<uint16_t>(b)))) all.push_back(static_cast<uint16_t>(b));
  }
  const int64_t n = static_cast<int64_t>(all.size());
  std::vector<float> f(all.size());
  std::vector<uint16_t> back(all.size());
  kernels::cast(cpu_ctx(), DType::f16, DType::f32, n, all.data(), f.data());
  kernels::cast(cpu_ctx(), DType::f32, DType::f16, n, f.data(), back.data());
  EXPECT_EQ(back, all);
  std::vector<double> d(all.size());
  kernels::cast(cpu_ctx(), DType::bf16, DType::f64, n, all.data(), d.data());
  kernels::cast(cpu_ctx(), DType::f64, DType::bf16, n, d.data(), back.data());
  EXPECT_EQ(back, all);
}

TEST(Cast, IntegerTypes) {
  std::vector<int64_t> labels{0, 3, -2, 9};
  std::vector<float> f(4);
  kernels::cast(cpu_ctx(), DType::i64, DType::f32, 4, labels.data(), f.data());
  EXPECT_EQ(f, (std::vector<float>{0, 3, -2, 9}));
  std::vector<uint8_t> mask{0, 1, 1, 0};
  std::vector<double> d(4);
  kernels::cast(cpu_ctx(), DType::u8, DType::f64, 4, mask.data(), d.data());
  EXPECT_EQ(d, (std::vector<double>{0, 1, 1, 0}));
  std::vector<float> g{2.7f, -2.7f, 0.2f, 7.0f};
  std::vector<int64_t> t(4);
  kernels::cast(cpu_ctx(), DType::f32, DType::i64, 4, g.data(), t.data());
  EXPECT_EQ(t, (std::vector<int64_t>{2, -2, 0, 7}));  // truncation toward zero
  kernels::cast(cpu_ctx(), DType::f32, DType::f16, 0, nullptr, nullptr);
}
