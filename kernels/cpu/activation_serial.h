// Activations over one contiguous run on the calling thread, for fused CPU kernels (batch norm +
// activation) that already split their rows over threads. x and y (dx) must not overlap.
#pragma once

#include <cstdint>

#include "kernels/elementwise.h"

namespace frugal::kernels::cpu {

// y = f(x); T is float or double.
template <typename T>
void activation_forward_serial(Activation act, int64_t n, const T* x, T* y);
// dx = f'(x) * dy, PyTorch's conventions at the kinks (kernels/elementwise.h).
template <typename T>
void activation_backward_serial(Activation act, int64_t n, const T* x, const T* dy, T* dx);

}  // namespace frugal::kernels::cpu
