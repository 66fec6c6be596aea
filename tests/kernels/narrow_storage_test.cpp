// f16 and bf16 tensors through the CPU kernels that compute them in f32 themselves (Note [CPU
// dtypes]): the conversions are bit-exact against base/half.h, and each kernel's 16-bit result
// is its f32 result on the same (widened) values, rounded once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/shape.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"
#include "kernels/cpu/widen.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_test_util.h"
#include "kernels/pooling.h"

namespace frugal::test {
namespace {

using kernels::Activation;
using kernels::cpu::narrow;
using kernels::cpu::widen;

const DType kHalfTypes[] = {DType::f16, DType::bf16};

uint16_t to_bits(DType dt, float v) {
  return dt == DType::f16 ? float_to_f16(v) : float_to_bf16(v);
}
float from_bits(DType dt, uint16_t h) {
  return dt == DType::f16 ? f16_to_float(h) : bf16_to_float(h);
}

// A 16-bit tensor of n values: bits, and the same values as f32.
struct Half {
  DType dtype;
  std::vector<uint16_t> bits;
  std::vector<float> f32;
  Half(DType dt, int64_t n)
      : dtype(dt), bits(static_cast<size_t>(n)), f32(static_cast<size_t>(n)) {}
  Half(DType dt, const std::vector<double>& v) : Half(dt, static_cast<int64_t>(v.size())) {
    for (size_t i = 0; i < v.size(); ++i) {
      bits[i] = to_bits(dt, static_cast<float>(v[i]));
      f32[i] = from_bits(dt, bits[i]);
    }
  }
  void* data() { return bits.data(); }
  std::vector<float> values() const {
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = from_bits(dtype, bits[i]);
    return out;
  }
};

// got (16-bit) equals want (f32) rounded once, exactly.
void expect_rounded(const Half& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got.bits[i], to_bits(got.dtype, want[i]))
        << what << " at element " << i << ": got " << from_bits(got.dtype, got.bits[i])
        << ", f32 result " << want[i];
  }
}

// got (16-bit) within one 16-bit rounding of want (f32, whose own rounding order may differ
// from the 16-bit path's chunked GEMMs in the last f32 bits): |got - want| <= ulp16 * |want| +
// a small absolute part for values that cancel.
void expect_within_rounding(const Half& got, const std::vector<float>& want,
                            const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.size()) << what;
  const double ulp = got.dtype == DType::f16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = from_bits(got.dtype, got.bits[i]);
    ASSERT_NEAR(g, want[i], ulp * std::abs(want[i]) + 1e-5 * scale) << what << " at element " << i;
  }
}

TEST(WidenNarrow, EveryBitPatternWidensAsTheScalarConversion) {
  std::vector<uint16_t> all(65536 + 5);  // a tail that is not a multiple of the vector width
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> got(all.size());
  widen(reinterpret_cast<const bf16_t*>(all.data()), static_cast<int64_t>(all.size()), got.data());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(float_bits(got[i]), float_bits(bf16_to_float(all[i]))) << "bf16 bits " << i;
    // the one-element conversion that kernels converting in place use (batch norm)
    const float one = kernels::cpu::widen1(bf16_t{all[i]});
    ASSERT_EQ(float_bits(one), float_bits(bf16_to_float(all[i]))) << "widen1, bf16 bits " << i;
  }
  widen(reinterpret_cast<const f16_t*>(all.data()), static_cast<int64_t>(all.size()), got.data());
  for (size_t i = 0; i < all.size(); ++i) {
    const float want = f16_to_float(all[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got[i])) << "f16 bits " << i;
    } else {
      ASSERT_EQ(float_bits(got[i]), float_bits(want)) << "f16 bits " << i;
    }
  }
}

TEST(WidenNarrow, NarrowRoundsAsTheScalarConversion) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65520.0f,
                          1e-8f,
                          -3e-5f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          bits_float(0x3f808000u),   // a bf16 tie, rounds to even (down)
                          bits_float(0x3f818000u),   // a bf16 tie, rounds to even (up)
                          bits_float(0x7f7fffffu)};  // rounds up to infinity in bf16
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 4001; ++i) v.push_back(bits_float(any_bits(gen)));
  std::vector<uint16_t> got(v.size());
  for (DType dt : kHalfTypes) {
    if (dt == DType::bf16) {
      narrow(v.data(), static_cast<int64_t>(v.size()), reinterpret_cast<bf16_t*>(got.data()));
    } else {
      narrow(v.data(), static_cast<int64_t>(v.size()), reinterpret_cast<f16_t*>(got.data()));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t want = to_bits(dt, v[i]);
      if (std::isnan(v[i])) {
        ASSERT_TRUE(std::isnan(from_bits(dt, got[i]))) << dt << " element " << i;
      } else {
        ASSERT_EQ(got[i], want) << dt << " element " << i << " = " << v[i];
      }
    }
  }
  // bf16's one-element narrowing: float_to_bf16 bit for bit, NaNs included
  for (size_t i = 0; i < v.size(); ++i) {
    bf16_t one;
    kernels::cpu::narrow1(v[i], one);
    ASSERT_EQ(one.bits, float_to_bf16(v[i])) << "narrow1, element " << i << " = " << v[i];
  }
}

struct ConvCase {
  const char* name;
  kernels::Conv2dShape s;
  bool bias;
};

kernels::Conv2dShape conv(int64_t n, int64_t h, int64_t c, int64_t k, int64_t kernel,
                          int64_t stride, int64_t pad, int64_t groups) {
  kernels::Conv2dShape s;
  s.n = n, s.h = h, s.w = h + 1, s.c = c, s.k = k;
  s.kh = s.kw = kernel;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.groups = groups;
  return s;
}

const ConvCase kConvCases[] = {
    {"pointwise", conv(3, 7, 24, 40, 1, 1, 0, 1), true},
    {"pointwise, many rows (chunks over threads)", conv(12, 33, 16, 24, 1, 1, 0, 1), false},
    {"grouped pointwise", conv(2, 5, 12, 18, 1, 1, 0, 3), true},
    {"stem 3x3 stride 2", conv(2, 9, 3, 16, 3, 2, 1, 1), true},
    {"grouped 3x3", conv(2, 6, 8, 12, 3, 1, 1, 2), false},
    {"depthwise 3x3", conv(2, 8, 20, 20, 3, 1, 1, 20), true},
    {"depthwise 3x3 stride 2", conv(3, 9, 17, 17, 3, 2, 1, 17), false},
};

TEST(NarrowStorageConv, ForwardAndGradientsAreTheF32ResultsRoundedOnce) {
  for (DType dt : kHalfTypes) {
    for (const ConvCase& cc : kConvCases) {
      const kernels::Conv2dShape& s = cc.s;
      const std::string what = std::string(cc.name) + " " + std::string(dtype_name(dt));
      const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
      const int64_t nw = s.k * s.kh * s.kw * s.cin_per_group();
      Half x(dt, random_values(nx, 1)), w(dt, random_values(nw, 2, -0.5, 0.5));
      Half b(dt, random_values(s.k, 3)), dy(dt, random_values(ny, 4));
      const void* bias16 = cc.bias ? b.data() : nullptr;
      const void* bias32 = cc.bias ? b.f32.data() : nullptr;

      Half y(dt, ny);
      std::vector<float> y32(static_cast<size_t>(ny));
      kernels::conv2d_forward(cpu_ctx(), dt, s, x.data(), w.data(), bias16, y.data());
      kernels::conv2d_forward(cpu_ctx(), DType::f32, s, x.f32.data(), w.f32.data(), bias32,
                              y32.data());
      expect_within_rounding(y, y32, what + " forward");

      Half dx(dt, nx);
      std::vector<float> dx32(static_cast<size_t>(nx));
      kernels::conv2d_backward_input(cpu_ctx(), dt, s, dy.data(), w.data(), dx.data());
      kernels::conv2d_backward_input(cpu_ctx(), DType::f32, s, dy.f32.data(), w.f32.data(),
                                     dx32.data());
      expect_within_rounding(dx, dx32, what + " input gradient");

      // dw in f32 (autocast's parameter gradients) and in the 16-bit dtype itself
      std::vector<float> dw32(static_cast<size_t>(nw)), db32(static_cast<size_t>(s.k));
      std::vector<float> dwf(static_cast<size_t>(nw)), dbf(static_cast<size_t>(s.k));
      kernels::conv2d_backward_weight(cpu_ctx(), DType::f32, DType::f32, s, x.f32.data(),
                                      dy.f32.data(), dw32.data(), db32.data());
      kernels::conv2d_backward_weight(cpu_ctx(), dt, DType::f32, s, x.data(), dy.data(), dwf.data(),
                                      dbf.data());
      double scale = 0;
      for (float v : dw32) scale = std::max(scale, std::abs(static_cast<double>(v)));
      for (size_t i = 0; i < dw32.size(); ++i) {
        ASSERT_NEAR(dwf[i], dw32[i], 1e-5 * scale) << what << " f32 dw at " << i;
      }
      for (int64_t j = 0; j < s.k; ++j) ASSERT_EQ(dbf[j], db32[j]) << what << " f32 dbias " << j;
      Half dw(dt, nw), db(dt, s.k);
      kernels::conv2d_backward_weight(cpu_ctx(), dt, dt, s, x.data(), dy.data(), dw.data(),
                                      db.data());
      expect_within_rounding(dw, dw32, what + " 16-bit dw");
      expect_rounded(db, db32, what + " 16-bit dbias");
    }
  }
}

TEST(NarrowStorageConv, WeightGradientTypeOtherThanInputOrF32IsRefused) {
  kernels::Conv2dShape s = conv(1, 4, 4, 4, 1, 1, 0, 1);
  std::vector<uint16_t> x(64), dy(64), dw(16);
  EXPECT_THROW(kernels::conv2d_backward_weight(cpu_ctx(), DType::bf16, DType::f16, s, x.data(),
                                               dy.data(), dw.data(), nullptr),
               Error);
}

TEST(NarrowStorageBatchNorm, EveryKernelIsItsF32ResultRoundedOnce) {
  const int64_t rows = 301, c = 24;  // rows split over threads, with a tail
  for (DType dt : kHalfTypes) {
    for (Activation act : {Activation::identity, Activation::relu6, Activation::hardswish}) {
      const std::string what =
          std::string(dtype_name(dt)) + " act " + std::to_string(static_cast<int>(act));
      Half x(dt, random_values(rows * c, 11, -3, 5)), dy(dt, random_values(rows * c, 12));
      std::vector<float> gamma(c), beta(c);
      for (int64_t j = 0; j < c; ++j) gamma[j] = 0.5f + 0.05f * j, beta[j] = 0.1f * j - 1;
      // f32 reference and 16-bit run, each with its own running statistics
      std::vector<float> rm32(c, 0.2f), rv32(c, 1.5f), rm16 = rm32, rv16 = rv32;
      std::vector<float> mean32(c), inv32(c), mean16(c), inv16(c);
      std::vector<float> y32(static_cast<size_t>(rows * c));
      Half y(dt, rows * c);
      kernels::batch_norm_act_forward_train(
          cpu_ctx(), DType::f32, act, rows, c, x.f32.data(), gamma.data(), beta.data(), 1e-5, 0.1,
          y32.data(), mean32.data(), inv32.data(), rm32.data(), rv32.data(), nullptr);
      int64_t batches = 6;  // num_batches_tracked
      kernels::batch_norm_act_forward_train(cpu_ctx(), dt, act, rows, c, x.data(), gamma.data(),
                                            beta.data(), 1e-5, 0.1, y.data(), mean16.data(),
                                            inv16.data(), rm16.data(), rv16.data(), &batches);
      EXPECT_EQ(batches, 7) << what;
      expect_rounded(y, y32, what + " training forward");
      EXPECT_EQ(mean16, mean32) << what;
      EXPECT_EQ(inv16, inv32) << what;
      EXPECT_EQ(rm16, rm32) << what;
      EXPECT_EQ(rv16, rv32) << what;

      Half y_again(dt, rows * c);
      kernels::batch_norm_act_apply(cpu_ctx(), dt, act, rows, c, x.data(), gamma.data(),
                                    beta.data(), mean16.data(), inv16.data(), y_again.data());
      EXPECT_EQ(y_again.bits, y.bits) << what << ": the recompute is the forward, bit for bit";

      std::vector<float> dx32(static_cast<size_t>(rows * c)), dg32(c), db32(c), dg16(c), db16(c);
      kernels::batch_norm_act_backward(cpu_ctx(), DType::f32, act, rows, c, x.f32.data(),
                                       dy.f32.data(), gamma.data(), beta.data(), mean32.data(),
                                       inv32.data(), dx32.data(), dg32.data(), db32.data());
      Half dx(dt, rows * c);
      kernels::batch_norm_act_backward(cpu_ctx(), dt, act, rows, c, x.data(), dy.data(),
                                       gamma.data(), beta.data(), mean16.data(), inv16.data(),
                                       dx.data(), dg16.data(), db16.data());
      expect_rounded(dx, dx32, what + " backward");
      EXPECT_EQ(dg16, dg32) << what;
      EXPECT_EQ(db16, db32) << what;
      // dx written over dy, as functional::batch_norm does when it holds the only handle
      Half dy_in_place = dy;
      kernels::batch_norm_act_backward(cpu_ctx(), dt, act, rows, c, x.data(), dy_in_place.data(),
                                       gamma.data(), beta.data(), mean16.data(), inv16.data(),
                                       dy_in_place.data(), dg16.data(), db16.data());
      EXPECT_EQ(dy_in_place.bits, dx.bits) << what << ": dx over dy";
    }
    Half x(dt, random_values(rows * c, 13)), y(dt, rows * c);
    std::vector<float> rm(c, 0.3f), rv(c, 2.0f), y32(static_cast<size_t>(rows * c));
    kernels::batch_norm_forward_eval(cpu_ctx(), DType::f32, rows, c, x.f32.data(), nullptr, nullptr,
                                     rm.data(), rv.data(), 1e-5, y32.data());
    kernels::batch_norm_forward_eval(cpu_ctx(), dt, rows, c, x.data(), nullptr, nullptr, rm.data(),
                                     rv.data(), 1e-5, y.data());
    expect_rounded(y, y32, std::string(dtype_name(dt)) + " evaluation forward");
  }
}

TEST(NarrowStorageElementwise, BinaryAndAffineAreTheF32ResultsRoundedOnce) {
  const Shape out{3, 5, 7, 300};
  const Shape shapes_b[] = {out, Shape{300}, Shape{3, 1, 1, 300}, Shape{1}};
  for (DType dt : kHalfTypes) {
    Half a(dt, random_values(out.numel(), 21));
    for (const Shape& sb : shapes_b) {
      Half b(dt, random_values(sb.numel(), 22, 0.5, 2.0));
      auto bc = kernels::make_broadcast(out, out, sb);
      for (auto op : {kernels::BinaryOp::add, kernels::BinaryOp::sub, kernels::BinaryOp::mul,
                      kernels::BinaryOp::div}) {
        Half y(dt, out.numel());
        std::vector<float> y32(static_cast<size_t>(out.numel()));
        kernels::binary(cpu_ctx(), op, dt, bc, a.data(), b.data(), y.data());
        kernels::binary(cpu_ctx(), op, DType::f32, bc, a.f32.data(), b.f32.data(), y32.data());
        expect_rounded(y, y32,
                       std::string(dtype_name(dt)) + " binary op " +
                           std::to_string(static_cast<int>(op)) + " b " + sb.str());
      }
      // b op a: the broadcast operand first, a stride-0 or strided left side
      auto bc_swapped = kernels::make_broadcast(out, sb, out);
      Half y(dt, out.numel());
      std::vector<float> y32(static_cast<size_t>(out.numel()));
      kernels::binary(cpu_ctx(), kernels::BinaryOp::sub, dt, bc_swapped, b.data(), a.data(),
                      y.data());
      kernels::binary(cpu_ctx(), kernels::BinaryOp::sub, DType::f32, bc_swapped, b.f32.data(),
                      a.f32.data(), y32.data());
      expect_rounded(y, y32, std::string(dtype_name(dt)) + " b - a, b " + sb.str());
    }
    // in place: out is a
    Half in_place = a;
    std::vector<float> y32(a.f32.size());
    kernels::affine(cpu_ctx(), dt, out.numel(), in_place.data(), 0.75, -0.5, in_place.data());
    kernels::affine(cpu_ctx(), DType::f32, out.numel(), a.f32.data(), 0.75, -0.5, y32.data());
    expect_rounded(in_place, y32, std::string(dtype_name(dt)) + " affine in place");
  }
}

TEST(NarrowStorageElementwise, ActivationsAndTheirGradientsAreTheF32ResultsRoundedOnce) {
  const int64_t n = 40000 + 3;  // split over threads, with a tail shorter than a block
  for (DType dt : kHalfTypes) {
    Half x(dt, random_values(n, 31, -8, 8)), dy(dt, random_values(n, 32));
    for (int a = 0; a < kernels::kNumActivations; ++a) {
      const auto act = static_cast<Activation>(a);
      const std::string what = std::string(dtype_name(dt)) + " activation " + std::to_string(a);
      Half y(dt, n), dx(dt, n);
      std::vector<float> y32(static_cast<size_t>(n)), dx32(static_cast<size_t>(n));
      kernels::activation_forward(cpu_ctx(), act, dt, n, x.data(), y.data());
      kernels::activation_forward(cpu_ctx(), act, DType::f32, n, x.f32.data(), y32.data());
      expect_rounded(y, y32, what + " forward");
      kernels::activation_backward(cpu_ctx(), act, dt, n, x.data(), dy.data(), dx.data());
      kernels::activation_backward(cpu_ctx(), act, DType::f32, n, x.f32.data(), dy.f32.data(),
                                   dx32.data());
      expect_rounded(dx, dx32, what + " backward");
    }
  }
}

TEST(NarrowStoragePooling, GlobalAveragePoolIsItsF32ResultRoundedOnce) {
  const int64_t n = 5, hw = 49, c = 40;
  for (DType dt : kHalfTypes) {
    Half x(dt, random_values(n * hw * c, 41)), dy(dt, random_values(n * c, 42));
    Half y(dt, n * c), dx(dt, n * hw * c);
    std::vector<float> y32(static_cast<size_t>(n * c)), dx32(static_cast<size_t>(n * hw * c));
    kernels::global_avg_pool_forward(cpu_ctx(), dt, n, hw, c, x.data(), y.data());
    kernels::global_avg_pool_forward(cpu_ctx(), DType::f32, n, hw, c, x.f32.data(), y32.data());
    expect_rounded(y, y32, std::string(dtype_name(dt)) + " global average pool");
    kernels::global_avg_pool_backward(cpu_ctx(), dt, n, hw, c, dy.data(), dx.data());
    kernels::global_avg_pool_backward(cpu_ctx(), DType::f32, n, hw, c, dy.f32.data(), dx32.data());
    expect_rounded(dx, dx32, std::string(dtype_name(dt)) + " global average pool backward");
  }
}

}  // namespace
}  // namespace frugal::test
