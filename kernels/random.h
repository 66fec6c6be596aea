// Counter-based random numbers: element i of a draw with (seed, offset) is a pure function of
// (seed, offset + i), so the CPU and CUDA produce the same values and a draw can be replayed
// (dropout masks, activation-checkpoint recompute) from its seed and offset alone.
#pragma once

#include <cstdint>

#include "base/half.h"
#include "kernels/context.h"

namespace frugal::kernels {

FRUGAL_HD uint64_t mix64(uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 random bits.
FRUGAL_HD float uniform01(uint64_t seed, uint64_t index) {
  uint64_t r = mix64(mix64(seed) ^ (index * 0x9e3779b97f4a7c15ull));
  return static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
}

// y[i] = lo + (hi - lo) * U(seed, offset + i)
FRUGAL_DECLARE_KERNEL(fill_uniform,
                      (const Context& ctx, DType dtype, int64_t n, void* y, uint64_t seed,
                       uint64_t offset, double lo, double hi),
                      (ctx, dtype, n, y, seed, offset, lo, hi))
// y[i] = mean + std * N(0,1), Box-Muller over draws offset + 2i and offset + 2i + 1: n values
// use the draws [offset, offset + 2n), so the caller reserves 2n (randn in core/factory.cpp).
FRUGAL_DECLARE_KERNEL(fill_normal,
                      (const Context& ctx, DType dtype, int64_t n, void* y, uint64_t seed,
                       uint64_t offset, double mean, double stddev),
                      (ctx, dtype, n, y, seed, offset, mean, stddev))

// Dropout: keep[i] = U(seed, o + i) >= p; y = keep ? x / (1 - p) : 0; mask (u8, nullable) keep,
// where o = offset + *offset_base, read by the kernel (a device counter inside a captured graph:
// Note [Random draws in captured graphs] in core/factory.h), or o = offset when offset_base is
// null. The same call on dy with the same draw is the backward: nn::functional::dropout keeps
// the draw (seed, offset, counter) instead of a mask.
FRUGAL_DECLARE_KERNEL(dropout_forward,
                      (const Context& ctx, DType dtype, int64_t n, const void* x, double p,
                       uint64_t seed, uint64_t offset, const uint64_t* offset_base, void* y,
                       uint8_t* mask),
                      (ctx, dtype, n, x, p, seed, offset, offset_base, y, mask))
FRUGAL_DECLARE_KERNEL(dropout_backward,
                      (const Context& ctx, DType dtype, int64_t n, const void* dy,
                       const uint8_t* mask, double p, void* dx),
                      (ctx, dtype, n, dy, mask, p, dx))

}  // namespace frugal::kernels
