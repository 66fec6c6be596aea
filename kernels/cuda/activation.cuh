// Activation functions on the device, shared by the elementwise kernels and the fused batch norm
// + activation kernels: computed in float, the activation chosen at run time (uniform per
// launch, so the switch does not diverge).
#pragma once

#include <type_traits>

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
  if constexpr (A == Activation::relu) {
    return x > 0.0f ? x : 0.0f;
  } else if constexpr (A == Activation::relu6) {
    return fminf(fmaxf(x, 0.0f), 6.0f);
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

struct ActForwardFn {
  Activation act;
  __device__ float operator()(float x) const {
    switch (act) {
      case Activation::relu:
        return act_forward<Activation::relu>(x);
      case Activation::relu6:
        return act_forward<Activation::relu6>(x);
      case Activation::hardswish:
        return act_forward<Activation::hardswish>(x);
      case Activation::silu:
        return act_forward<Activation::silu>(x);
      case Activation::sigmoid:
        return act_forward<Activation::sigmoid>(x);
      case Activation::identity:
        return act_forward<Activation::identity>(x);
    }
    return 0.0f;
  }
};

// dx = f'(x) * dy; the kinks follow PyTorch (relu/relu6 pass where 0 < x (< 6), hardswish is
// x/3 + 1/2 on [-3, 3]). The activation fixed at compile time, as act_forward.
template <Activation A>
__device__ __forceinline__ float act_backward(float x, float dy) {
  if constexpr (A == Activation::relu) {
    return x > 0.0f ? dy : 0.0f;
  } else if constexpr (A == Activation::relu6) {
    return (x > 0.0f && x < 6.0f) ? dy : 0.0f;
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

// Runs launch(std::integral_constant<Activation, A>{}) with A = act: one kernel per activation,
// for kernels whose loop applies it to every element (Note [Batch norm's activation at compile
// time] in kernels/cuda/batch_norm.cu).
template <typename Launch>
void with_activation(Activation act, Launch launch) {
  switch (act) {
    case Activation::relu:
      return launch(std::integral_constant<Activation, Activation::relu>{});
    case Activation::relu6:
      return launch(std::integral_constant<Activation, Activation::relu6>{});
    case Activation::hardswish:
      return launch(std::integral_constant<Activation, Activation::hardswish>{});
    case Activation::silu:
      return launch(std::integral_constant<Activation, Activation::silu>{});
    case Activation::sigmoid:
      return launch(std::integral_constant<Activation, Activation::sigmoid>{});
    case Activation::identity:
      return launch(std::integral_constant<Activation, Activation::identity>{});
  }
}

struct ActBackwardFn {
  Activation act;
  __device__ float operator()(float x, float dy) const {
    switch (act) {
      case Activation::relu:
        return act_backward<Activation::relu>(x, dy);
      case Activation::relu6:
        return act_backward<Activation::relu6>(x, dy);
      case Activation::hardswish:
        return act_backward<Activation::hardswish>(x, dy);
      case Activation::silu:
        return act_backward<Activation::silu>(x, dy);
      case Activation::sigmoid:
        return act_backward<Activation::sigmoid>(x, dy);
      case Activation::identity:
        return act_backward<Activation::identity>(x, dy);
    }
    return 0.0f;
  }
};

}  // namespace frugal::kernels::cuda
