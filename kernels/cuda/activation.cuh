// Activation functions on the device, shared by the elementwise kernels and the fused batch norm
// + activation kernels: computed in float, the activation chosen at run time (uniform per
// launch, so the switch does not diverge).
#pragma once

#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/elementwise.h"

namespace frugal::kernels::cuda {

// __expf and a correctly rounded reciprocal instead of expf and an IEEE division: SiLU sits in
// every fused batch norm of EfficientNet, forward, backward and recomputed, and the accurate forms
// made those passes compute bound. exp(-x) overflows to inf for x < -88, and 1 / inf = 0 as the
// limit is; the relative error stays within a few f32 ulp of the accurate form.
__device__ __forceinline__ float sigmoidf(float x) { return __frcp_rn(1.0f + __expf(-x)); }

// The activation fixed at compile time, for kernels that apply it inside their loads (Note [Batch
// norm inside the depthwise convolution] in kernels/conv.h): a switch there sits between loads
// the compiler would otherwise issue together.
template <Activation A>
__device__ __forceinline__ float act_forward(float x) {
  // relu and relu6 are written so that NaN passes (every comparison with NaN is false; fmaxf
  // would return the 0), as on the CPU and in PyTorch: a NaN from an overflow must reach the
  // loss for the gradient scaler to skip the step, not turn into zeros on the way.
  if constexpr (A == Activation::relu) {
    return x < 0.0f ? 0.0f : x;
  } else if constexpr (A == Activation::relu6) {
    return x < 0.0f ? 0.0f : (x > 6.0f ? 6.0f : x);
  } else if constexpr (A == Activation::hardswish) {
    return x * fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
  } else if constexpr (A == Activation::silu) {
    return x * sigmoidf(x);
  } else if constexpr (A == Activation::sigmoid) {
    return sigmoidf(x);
  } else {
    return x;
  }
}

// Note [Clamps after rounding]: relu and relu6 commute with rounding to nearest, which is monotone
// and keeps 0 and 6; so rounding batch norm's f32 output and then clamping the 16-bit values
// gives the values that clamping in f32 and then rounding gives, and a pair of 16-bit values
// clamps in one instruction (max/min.NaN.f16x2, .bf16x2) where f32 takes one a value a bound.
// NaN stays NaN either way (the _nan forms return it; the plain ones would return the bound).
// Only a zero's sign may differ, which changes no sum that starts from +0 or holds a nonzero term.
template <Activation A, typename T, int N>
constexpr bool clamps_after_rounding =
    (A == Activation::relu || A == Activation::relu6) && N % 2 == 0 && is_16bit<T>;

// x = float(clamp(round_to_T(x))) for A = relu or relu6, a pair of values at a time: the pair
// stays packed from the rounding to the conversion back.
template <Activation A, typename T, int N>
__device__ __forceinline__ void round_and_clamp(float (&x)[N]) {
  static_assert(clamps_after_rounding<A, T, N>);
  constexpr bool half = std::is_same_v<T, __half>;
  // The bounds from their bits: a conversion is inline assembly, which the compiler does not
  // fold, and each clamp would convert them again.
  T zero1, six1;
  if constexpr (half) {
    zero1 = __ushort_as_half(0x0000);
    six1 = __ushort_as_half(0x4600);
  } else {
    zero1 = __ushort_as_bfloat16(0x0000);
    six1 = __ushort_as_bfloat16(0x40c0);
  }
  const PairOf<T> zero(zero1, zero1), six(six1, six1);
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    PairOf<T> p = __hmax2_nan(round_pair<T>(x[i], x[i + 1]), zero);
    if constexpr (A == Activation::relu6) p = __hmin2_nan(p, six);
    const float2 f = widen_pair<T>(p);
    x[i] = f.x;
    x[i + 1] = f.y;
  }
}

// dx = f'(x) * dy; the kinks follow PyTorch (relu/relu6 stop where x <= 0 (or x >= 6), so NaN
// passes dy; hardswish is x/3 + 1/2 on [-3, 3]). The activation fixed at compile time, as
// act_forward.
template <Activation A>
__device__ __forceinline__ float act_backward(float x, float dy) {
  if constexpr (A == Activation::relu) {
    return x <= 0.0f ? 0.0f : dy;
  } else if constexpr (A == Activation::relu6) {
    return (x <= 0.0f || x >= 6.0f) ? 0.0f : dy;
  } else if constexpr (A == Activation::hardswish) {
    return x < -3.0f ? 0.0f : (x <= 3.0f ? dy * (x / 3.0f + 0.5f) : dy);
  } else if constexpr (A == Activation::silu) {
    float s = sigmoidf(x);
    return dy * s * (1.0f + x * (1.0f - s));
  } else if constexpr (A == Activation::sigmoid) {
    float s = sigmoidf(x);
    return dy * s * (1.0f - s);
  } else {
    return dy;
  }
}

// Returns f(std::integral_constant<Activation, A>{}) with A = act: the one switch from the run-time
// activation to a compile-time one, for host launches (one kernel per activation, for kernels
// whose loop applies it to every element: Note [Batch norm's activation at compile time] in
// kernels/cuda/batch_norm.cu) and the device functors below alike. Host lambdas pass through this
// __host__ __device__ template, hence the exec check's pragma, as in Thrust and Eigen.
#pragma nv_exec_check_disable
template <typename F>
__host__ __device__ __forceinline__ decltype(auto) with_activation(Activation act, F&& f) {
  using A = Activation;
  switch (act) {
    case A::relu:
      return f(std::integral_constant<A, A::relu>{});
    case A::relu6:
      return f(std::integral_constant<A, A::relu6>{});
    case A::hardswish:
      return f(std::integral_constant<A, A::hardswish>{});
    case A::silu:
      return f(std::integral_constant<A, A::silu>{});
    case A::sigmoid:
      return f(std::integral_constant<A, A::sigmoid>{});
    case A::identity:
      break;
  }
  return f(std::integral_constant<A, A::identity>{});
}

struct ActForwardFn {
  Activation act;
  __device__ float operator()(float x) const {
    return with_activation(act, [&](auto a) { return act_forward<decltype(a)::value>(x); });
  }
};

struct ActBackwardFn {
  Activation act;
  __device__ float operator()(float x, float dy) const {
    return with_activation(act, [&](auto a) { return act_backward<decltype(a)::value>(x, dy); });
  }
};

}  // namespace frugal::kernels::cuda
