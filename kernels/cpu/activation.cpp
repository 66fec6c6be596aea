// CPU activations (relu, relu6, hardswish, silu, sigmoid): forward, and backward from the
// forward input x with PyTorch's conventions at the kinks (documented per activation below).
#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/elementwise.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 16384;

template <typename T>
inline T sigmoid_of(T x) {
  return T(1) / (T(1) + std::exp(-x));
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
}

template <Activation act, typename T>
inline T backward_one(T x, T dy) {
  // relu: threshold_backward, gradient only where x > 0.
  if constexpr (act == Activation::relu) return x > T(0) ? dy : T(0);
  // relu6 = hardtanh(0, 6): gradient only strictly inside (0, 6).
  if constexpr (act == Activation::relu6) return (x > T(0) && x < T(6)) ? dy : T(0);
  // hardswish: 0 for x < -3, dy * (x / 3 + 1/2) for -3 <= x <= 3, dy for x > 3 (PyTorch's
  // scalar and CUDA kernels; both ends of [-3, 3] use the middle formula).
  if constexpr (act == Activation::hardswish) {
    return x < T(-3) ? T(0) : (x <= T(3) ? dy * (x / T(3) + T(0.5)) : dy);
  }
  if constexpr (act == Activation::silu) {
    T s = sigmoid_of(x);
    return dy * s * (T(1) + x * (T(1) - s));
  }
  if constexpr (act == Activation::sigmoid) {
    T s = sigmoid_of(x);
    return dy * s * (T(1) - s);
  }
}

template <Activation act, typename T>
void forward_impl(int64_t n, const T* __restrict x, T* __restrict y) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = forward_one<act>(x[i]);
  });
}

template <Activation act, typename T>
void backward_impl(int64_t n, const T* __restrict x, const T* __restrict dy, T* __restrict dx) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dx[i] = backward_one<act>(x[i], dy[i]);
  });
}

template <typename T>
void forward_dispatch(Activation act, int64_t n, const void* x, void* y) {
  auto* px = static_cast<const T*>(x);
  auto* py = static_cast<T*>(y);
  switch (act) {
    case Activation::relu: return forward_impl<Activation::relu>(n, px, py);
    case Activation::relu6: return forward_impl<Activation::relu6>(n, px, py);
    case Activation::hardswish: return forward_impl<Activation::hardswish>(n, px, py);
    case Activation::silu: return forward_impl<Activation::silu>(n, px, py);
    case Activation::sigmoid: return forward_impl<Activation::sigmoid>(n, px, py);
  }
  FRUGAL_FAIL("activation_forward: unknown activation ", static_cast<int>(act));
}

template <typename T>
void backward_dispatch(Activation act, int64_t n, const void* x, const void* dy, void* dx) {
  auto* px = static_cast<const T*>(x);
  auto* pdy = static_cast<const T*>(dy);
  auto* pdx = static_cast<T*>(dx);
  switch (act) {
    case Activation::relu: return backward_impl<Activation::relu>(n, px, pdy, pdx);
    case Activation::relu6: return backward_impl<Activation::relu6>(n, px, pdy, pdx);
    case Activation::hardswish: return backward_impl<Activation::hardswish>(n, px, pdy, pdx);
    case Activation::silu: return backward_impl<Activation::silu>(n, px, pdy, pdx);
    case Activation::sigmoid: return backward_impl<Activation::sigmoid>(n, px, pdy, pdx);
  }
  FRUGAL_FAIL("activation_backward: unknown activation ", static_cast<int>(act));
}

}  // namespace

void activation_forward(const Context& ctx, Activation act, DType dtype, int64_t n, const void* x,
                        void* y) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "activation_forward: negative size ", n);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "activation_forward", forward_dispatch<T>(act, n, x, y));
}

void activation_backward(const Context& ctx, Activation act, DType dtype, int64_t n,
                         const void* x, const void* dy, void* dx) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "activation_backward: negative size ", n);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "activation_backward",
                          backward_dispatch<T>(act, n, x, dy, dx));
}

}  // namespace frugal::kernels::cpu
