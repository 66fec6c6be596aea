// CPU activations (relu, relu6, hardswish, silu, sigmoid, identity): forward, and backward from the
// forward input x with PyTorch's conventions at the kinks (documented per activation below).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/activation_one.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/widen.h"
#include "kernels/elementwise.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 16384;

// One vectorised loop per activation and type, in named functions, shared by the f32/f64 kernels
// and the 16-bit ones' blocks below.
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

// f16 and bf16 (storage S) go through f32 blocks on the stack: widened, computed, narrowed
// (Note [CPU dtypes]); y (dx) may be x (dy) itself.
constexpr int64_t kBlock = 256;

template <typename S>
void forward_dispatch(Activation act, int64_t n, const void* xv, void* yv) {
  const S* x = static_cast<const S*>(xv);
  S* y = static_cast<S*>(yv);
  if constexpr (is_narrow_v<S>) {
    with_activation(act, "activation_forward", [&](auto a) {
      parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
        float xb[kBlock], yb[kBlock];
        for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
          const int64_t m = std::min(kBlock, end - i0);
          widen(x + i0, m, xb);
          forward_range<decltype(a)::value>(m, static_cast<const float*>(xb), yb);
          narrow(yb, m, y + i0);
        }
      });
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
    with_activation(act, "activation_backward", [&](auto a) {
      parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
        float xb[kBlock], dyb[kBlock], dxb[kBlock];
        for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
          const int64_t m = std::min(kBlock, end - i0);
          widen(x + i0, m, xb);
          widen(dy + i0, m, dyb);
          backward_range<decltype(a)::value>(m, static_cast<const float*>(xb),
                                             static_cast<const float*>(dyb), dxb);
          narrow(dxb, m, dx + i0);
        }
      });
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

}  // namespace frugal::kernels::cpu
