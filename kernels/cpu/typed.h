// Per-element load and store for CPU kernels that take every floating dtype: f16 and bf16 are
// converted to float one element at a time (no f32 copy of the tensor), f32 stays float and f64
// double (Note [CPU dtypes]).
#pragma once

#include "base/half.h"
#include "kernels/cpu/cpu_common.h"

namespace frugal::kernels::cpu {

template <typename S>
struct Num;  // S: the storage type (its DType: dtype); C: the compute type
template <>
struct Num<float> {
  static constexpr DType dtype = DType::f32;
  using C = float;
  static C load(float v) { return v; }
  static float store(C v) { return v; }
};
template <>
struct Num<double> {
  static constexpr DType dtype = DType::f64;
  using C = double;
  static C load(double v) { return v; }
  static double store(C v) { return v; }
};
template <>
struct Num<f16_t> {
  static constexpr DType dtype = DType::f16;
  using C = float;
  static C load(f16_t v) { return f16_to_float(v.bits); }
  static f16_t store(C v) { return {float_to_f16(v)}; }
};
template <>
struct Num<bf16_t> {
  static constexpr DType dtype = DType::bf16;
  using C = float;
  static C load(bf16_t v) { return bf16_to_float(v.bits); }
  static bf16_t store(C v) { return {float_to_bf16(v)}; }
};

// Runs `body` with S bound to the storage type of `dtype` (float, double, f16_t, bf16_t);
// throws naming `op` for integer dtypes.
#define FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, op, ...)                  \
  switch (dtype) {                                                   \
    case ::frugal::DType::f32: {                                     \
      using S = float;                                               \
      __VA_ARGS__;                                                   \
      break;                                                         \
    }                                                                \
    case ::frugal::DType::f64: {                                     \
      using S = double;                                              \
      __VA_ARGS__;                                                   \
      break;                                                         \
    }                                                                \
    case ::frugal::DType::f16: {                                     \
      using S = ::frugal::f16_t;                                     \
      __VA_ARGS__;                                                   \
      break;                                                         \
    }                                                                \
    case ::frugal::DType::bf16: {                                    \
      using S = ::frugal::bf16_t;                                    \
      __VA_ARGS__;                                                   \
      break;                                                         \
    }                                                                \
    default:                                                         \
      FRUGAL_FAIL(op, ": dtype ", dtype, " is not a floating type"); \
  }

// Offsets of element i of a broadcast (Broadcast in kernels/elementwise.h) into a and b.
template <typename BC>
inline void broadcast_offsets(const BC& bc, int64_t i, int64_t& ia, int64_t& ib) {
  ia = 0;
  ib = 0;
  for (int d = bc.ndim - 1; d >= 0; --d) {
    int64_t q = i / bc.out_dims[d], idx = i - q * bc.out_dims[d];
    i = q;
    ia += idx * bc.a_strides[d];
    ib += idx * bc.b_strides[d];
  }
}

}  // namespace frugal::kernels::cpu
