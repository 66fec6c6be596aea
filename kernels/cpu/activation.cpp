// CPU activations (relu, relu6, hardswish, silu, sigmoid, identity): forward, and backward from the
// forward input x with PyTorch's conventions at the kinks (documented per activation below).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/activation_serial.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/widen.h"
#include "kernels/elementwise.h"

// GCC 12 will not if-convert a clamp followed by arithmetic while floating-point exceptions are
// treated as observable, which keeps these loops scalar. Nothing here reads the FP status flags,
// so let it (results are unchanged: no reassociation, no change to NaN or rounding). Functions
// from headers included above keep the old options and GCC will not inline them into code
// compiled under the pragma: inside the loops, use builtins only (__builtin_bit_cast).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 16384;

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
  // relu: threshold_backward, gradient only where x > 0.
  if constexpr (act == Activation::relu) return x > T(0) ? dy : T(0);
  // relu6 = hardtanh(0, 6): gradient only strictly inside (0, 6).
  if constexpr (act == Activation::relu6) return ((x > T(0)) & (x < T(6))) ? dy : T(0);
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

// The loops live in named functions, not in the lambdas handed to parallel_for: a lambda is
// compiled with parallel_for's options, and would lose the pragma above.
template <Activation act, typename T>
__attribute__((noinline)) void forward_range(int64_t n, const T* __restrict x, T* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] = forward_one<act>(x[i]);
}

template <Activation act, typename T>
__attribute__((noinline)) void backward_range(int64_t n, const T* __restrict x,
                                              const T* __restrict dy, T* __restrict dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = backward_one<act>(x[i], dy[i]);
}

template <Activation act, typename T>
void forward_impl(int64_t n, const T* x, T* y) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    forward_range<act>(end - begin, x + begin, y + begin);
  });
}

template <Activation act, typename T>
void backward_impl(int64_t n, const T* x, const T* dy, T* dx) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    backward_range<act>(end - begin, x + begin, dy + begin, dx + begin);
  });
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

// f16 and bf16 (storage S) go through f32 blocks on the stack: widened, computed, narrowed
// (Note [CPU dtypes]); y (dx) may be x (dy) itself.
constexpr int64_t kBlock = 256;

template <typename S>
void forward_dispatch(Activation act, int64_t n, const void* xv, void* yv) {
  const S* x = static_cast<const S*>(xv);
  S* y = static_cast<S*>(yv);
  if constexpr (is_narrow_v<S>) {
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      float xb[kBlock], yb[kBlock];
      for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
        const int64_t m = std::min(kBlock, end - i0);
        widen(x + i0, m, xb);
        activation_forward_serial(act, m, static_cast<const float*>(xb), yb);
        narrow(yb, m, y + i0);
      }
    });
  } else {
    with_activation(act, "activation_forward",
                    [&](auto a) { forward_impl<decltype(a)::value>(n, x, y); });
  }
}

template <typename S>
void backward_dispatch(Activation act, int64_t n, const void* xv, const void* dyv, void* dxv) {
  const S* x = static_cast<const S*>(xv);
  const S* dy = static_cast<const S*>(dyv);
  S* dx = static_cast<S*>(dxv);
  if constexpr (is_narrow_v<S>) {
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      float xb[kBlock], dyb[kBlock], dxb[kBlock];
      for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
        const int64_t m = std::min(kBlock, end - i0);
        widen(x + i0, m, xb);
        widen(dy + i0, m, dyb);
        activation_backward_serial(act, m, static_cast<const float*>(xb),
                                   static_cast<const float*>(dyb), dxb);
        narrow(dxb, m, dx + i0);
      }
    });
  } else {
    with_activation(act, "activation_backward",
                    [&](auto a) { backward_impl<decltype(a)::value>(n, x, dy, dx); });
  }
}

}  // namespace

void activation_forward(const Context& ctx, Activation act, DType dtype, int64_t n, const void* x,
                        void* y) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "activation_forward: negative size ", n);
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "activation_forward", forward_dispatch<S>(act, n, x, y));
}

void activation_backward(const Context& ctx, Activation act, DType dtype, int64_t n, const void* x,
                         const void* dy, void* dx) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "activation_backward: negative size ", n);
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "activation_backward",
                              backward_dispatch<S>(act, n, x, dy, dx));
}

template <typename T>
void activation_forward_serial(Activation act, int64_t n, const T* x, T* y) {
  with_activation(act, "activation_forward",
                  [&](auto a) { forward_range<decltype(a)::value>(n, x, y); });
}

template <typename T>
void activation_backward_serial(Activation act, int64_t n, const T* x, const T* dy, T* dx) {
  with_activation(act, "activation_backward",
                  [&](auto a) { backward_range<decltype(a)::value>(n, x, dy, dx); });
}

template void activation_forward_serial<float>(Activation, int64_t, const float*, float*);
template void activation_forward_serial<double>(Activation, int64_t, const double*, double*);
template void activation_backward_serial<float>(Activation, int64_t, const float*, const float*,
                                                float*);
template void activation_backward_serial<double>(Activation, int64_t, const double*, const double*,
                                                 double*);

}  // namespace frugal::kernels::cpu
