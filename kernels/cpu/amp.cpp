// CPU loss-scaling kernels (kernels/amp.h): the reference the CUDA twins are tested against.
#include "kernels/amp.h"

#include <atomic>
#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/elementwise.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 16384;

bool flagged(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

}  // namespace

void unscale_and_check(const Context& ctx, int64_t n, float* grad, const float* scale,
                       float* found_inf) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "unscale_and_check: negative size ", n);
  FRUGAL_CHECK(scale != nullptr && found_inf != nullptr,
               "unscale_and_check: scale and found_inf must be given");
  const float inv = 1.0f / *scale;
  std::atomic_ref<float> flag(*found_inf);
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    bool bad = false;
    for (int64_t i = begin; i < end; ++i) {
      bad = bad || !std::isfinite(grad[i]);
      grad[i] *= inv;
    }
    if (bad) flag.store(1.0f, std::memory_order_relaxed);
  });
}

void unscale_and_check_many(const Context& ctx, int64_t count, float* const* grads,
                            const int64_t* sizes, const float* scale, float* found_inf) {
  FRUGAL_CHECK(count >= 0, "unscale_and_check_many: negative count ", count);
  for (int64_t t = 0; t < count; ++t) {
    cpu::unscale_and_check(ctx, sizes[t], grads[t], scale, found_inf);
  }
}

void lower_many(const Context& ctx, DType to, int64_t count, const float* const* srcs,
                void* const* dsts, const int64_t* sizes) {
  FRUGAL_CHECK(count >= 0, "lower_many: negative count ", count);
  FRUGAL_CHECK(is_low_precision(to), "lower_many: target must be f16 or bf16, got ", to);
  for (int64_t t = 0; t < count; ++t) cpu::cast(ctx, DType::f32, to, sizes[t], srcs[t], dsts[t]);
}

void update_scale(const Context& ctx, float* scale, float* growth_tracker, const float* found_inf,
                  double growth_factor, double backoff_factor, int64_t growth_interval) {
  (void)ctx;
  FRUGAL_CHECK(found_inf != nullptr, "update_scale: found_inf must be given");
  FRUGAL_CHECK(growth_interval > 0, "update_scale: growth_interval must be > 0, got ",
               growth_interval);
  if (flagged(found_inf)) {
    *scale = static_cast<float>(*scale * backoff_factor);
    *growth_tracker = 0.0f;
    return;
  }
  const float successful = *growth_tracker + 1.0f;
  if (successful >= static_cast<float>(growth_interval)) {
    const float grown = static_cast<float>(*scale * growth_factor);
    if (std::isfinite(grown)) *scale = grown;
    *growth_tracker = 0.0f;
  } else {
    *growth_tracker = successful;
  }
}

void count_step(const Context& ctx, float* step, const float* found_inf) {
  (void)ctx;
  if (!flagged(found_inf)) *step += 1.0f;
}

}  // namespace frugal::kernels::cpu
