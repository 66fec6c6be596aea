// CPU random fills and dropout from the counter-based generator of kernels/random.h.
//
// Note [Random formulas]: the CUDA twins must compute exactly this, element i of a draw:
//   u      = uniform01(seed, offset + i)                      (float, 24 bits, exact)
//   uniform: y = T(lo + (hi - lo) * double(u))                (in double, rounded once to T)
//            and y = T(lo) where that rounding reached hi (Note [Uniform draws below hi])
//   normal:  u1 = uniform01(seed, 2 (offset + i)), u2 = uniform01(seed, 2 (offset + i) + 1),
//            r = sqrt(-2 log(1 - double(u1)))  (1 - u1 is in (0, 1], so log never sees 0),
//            y = T(mean + stddev * r * cos(2 pi double(u2)))  (in double, rounded once to T)
//   dropout: keep = double(u) >= p; y = keep ? x * T(1 / (1 - p)) : 0; mask = keep.
// Doing the transcendental parts in double makes the CPU and CUDA results equal after rounding
// to f32 except in vanishingly rare ties.
#include "kernels/random.h"

#include <cmath>

#include "kernels/cpu/cpu_common.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 16384;
constexpr double kTwoPi = 6.283185307179586476925286766559;

void check_dropout_p(const char* op, double p) {
  FRUGAL_CHECK(p >= 0 && p <= 1, op, ": probability ", p, " is outside [0, 1]");
}

}  // namespace

void fill_uniform(const Context& ctx, DType dtype, int64_t n, void* y, uint64_t seed,
                  uint64_t offset, double lo, double hi) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "fill_uniform: negative size ", n);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "fill_uniform", {
    T* py = static_cast<T*>(y);
    const double range = hi - lo;
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        double u = uniform01(seed, offset + static_cast<uint64_t>(i));
        const T v = static_cast<T>(lo + range * u);
        py[i] = static_cast<double>(v) >= hi ? static_cast<T>(lo) : v;  // [Uniform draws below hi]
      }
    });
  });
}

void fill_normal(const Context& ctx, DType dtype, int64_t n, void* y, uint64_t seed,
                 uint64_t offset, double mean, double stddev) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "fill_normal: negative size ", n);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "fill_normal", {
    T* py = static_cast<T*>(y);
    parallel_for(n, kGrain / 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        uint64_t k = offset + 2 * static_cast<uint64_t>(i);
        double u1 = uniform01(seed, k);
        double u2 = uniform01(seed, k + 1);
        double r = std::sqrt(-2.0 * std::log(1.0 - u1));
        py[i] = static_cast<T>(mean + stddev * r * std::cos(kTwoPi * u2));
      }
    });
  });
}

void dropout_forward(const Context& ctx, DType dtype, int64_t n, const void* x, double p,
                     uint64_t seed, uint64_t offset, const uint64_t* offset_base, void* y,
                     uint8_t* mask) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "dropout_forward: negative size ", n);
  check_dropout_p("dropout_forward", p);
  if (offset_base != nullptr) offset += *offset_base;  // a host counter here
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "dropout_forward", {
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    // p == 1 keeps nothing, so the infinite scale is never multiplied.
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        bool keep = static_cast<double>(uniform01(seed, offset + static_cast<uint64_t>(i))) >= p;
        if (mask != nullptr) mask[i] = keep ? 1 : 0;
        py[i] = keep ? px[i] * scale : T(0);
      }
    });
  });
}

void dropout_backward(const Context& ctx, DType dtype, int64_t n, const void* dy,
                      const uint8_t* mask, double p, void* dx) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "dropout_backward: negative size ", n);
  check_dropout_p("dropout_backward", p);
  FRUGAL_CPU_FLOAT_SWITCH(dtype, "dropout_backward", {
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) pdx[i] = mask[i] != 0 ? pdy[i] * scale : T(0);
    });
  });
}

}  // namespace frugal::kernels::cpu
