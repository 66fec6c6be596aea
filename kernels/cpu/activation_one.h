// One activation value at a time, forward and backward, written so that loops calling them
// vectorise (plain arithmetic and selects, no calls into libm): the activation kernels and the
// kernels that fuse an activation (batch norm) share them, so a fused result is the unfused one.
//
// GCC 12 if-converts a clamp followed by arithmetic only when floating-point exceptions are not
// observable; the CPU kernels are built with -fno-trapping-math for that (CMakeLists.txt). Nothing
// in frugal reads the FP status flags, and results are unchanged (no reassociation, no change to
// NaN or rounding).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/elementwise.h"

namespace frugal::kernels::cpu {

// exp for f32 in plain arithmetic so that loops calling it vectorise (std::exp does not):
// Cephes' expf, range-reduced by n = round(x / ln 2), a degree-5 polynomial on
// |r| <= ln(2) / 2, scaled by 2^n through the exponent bits; within a few ulp. x is clamped to
// [-87, 88], where 2^n stays a normal float; NaN propagates through r.
inline float exp_f32(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // Round x / ln 2 to an integer with the 1.5 * 2^23 trick (std::floor does not vectorise);
  // the integer is read from the low mantissa bits of t.
  float t = x * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  int32_t ni = __builtin_bit_cast(int32_t, t) - 0x4B400000;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln 2 split in two for exactness
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float e = p * r * r + r + 1.0f;
  return e * __builtin_bit_cast(float, (ni + 127) << 23);
}
inline double exp_any(double x) { return std::exp(x); }  // f64 is for gradient checks
inline float exp_any(float x) { return exp_f32(x); }

template <typename T>
inline T sigmoid_of(T x) {
  return T(1) / (T(1) + exp_any(-x));
}

// Comparisons are written so that NaN inputs propagate (NaN < 0 is false), as in PyTorch.
template <Activation act, typename T>
inline T forward_one(T x) {
  if constexpr (act == Activation::relu) return x < T(0) ? T(0) : x;
  if constexpr (act == Activation::relu6) return x < T(0) ? T(0) : (x > T(6) ? T(6) : x);
  if constexpr (act == Activation::hardswish) {
    T r = x + T(3);
    r = r < T(0) ? T(0) : (r > T(6) ? T(6) : r);
    return x * r / T(6);
  }
  if constexpr (act == Activation::silu) return x * sigmoid_of(x);
  if constexpr (act == Activation::sigmoid) return sigmoid_of(x);
  if constexpr (act == Activation::identity) return x;
}

template <Activation act, typename T>
inline T backward_one(T x, T dy) {
  // relu: threshold_backward, no gradient where x <= 0. relu6 = hardtanh(0, 6): no gradient
  // where x <= 0 or x >= 6. Written as where the gradient stops, as PyTorch writes them, so
  // that at NaN (every comparison false) dy passes and a NaN gradient reaches the scaler.
  if constexpr (act == Activation::relu) return x <= T(0) ? T(0) : dy;
  if constexpr (act == Activation::relu6) return ((x <= T(0)) | (x >= T(6))) ? T(0) : dy;
  // hardswish: 0 for x < -3, dy * (x / 3 + 1/2) for -3 <= x <= 3, dy for x > 3 (PyTorch's
  // scalar and CUDA kernels; both ends of [-3, 3] use the middle formula).
  if constexpr (act == Activation::hardswish) {  // both branches computed: vectorises
    T mid = dy * (x / T(3) + T(0.5));
    T r = x <= T(3) ? mid : dy;
    return x < T(-3) ? T(0) : r;
  }
  if constexpr (act == Activation::silu) {
    T s = sigmoid_of(x);
    return dy * s * (T(1) + x * (T(1) - s));
  }
  if constexpr (act == Activation::sigmoid) {
    T s = sigmoid_of(x);
    return dy * s * (T(1) - s);
  }
  if constexpr (act == Activation::identity) return dy;
}

// Calls fn(std::integral_constant<Activation, act>) for the runtime `act`.
template <typename Fn>
void with_activation(Activation act, const char* op, Fn&& fn) {
  switch (act) {
    case Activation::relu:
      return fn(std::integral_constant<Activation, Activation::relu>{});
    case Activation::relu6:
      return fn(std::integral_constant<Activation, Activation::relu6>{});
    case Activation::hardswish:
      return fn(std::integral_constant<Activation, Activation::hardswish>{});
    case Activation::silu:
      return fn(std::integral_constant<Activation, Activation::silu>{});
    case Activation::sigmoid:
      return fn(std::integral_constant<Activation, Activation::sigmoid>{});
    case Activation::identity:
      return fn(std::integral_constant<Activation, Activation::identity>{});
  }
  FRUGAL_FAIL(op, ": unknown activation ", static_cast<int>(act));
}

}  // namespace frugal::kernels::cpu
