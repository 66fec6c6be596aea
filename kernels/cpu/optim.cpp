// CPU fused optimizer updates (SGD with momentum, AdamW) over f32 parameters, following
// PyTorch's single-tensor formulas term by term; found_inf != 0 skips the step untouched.
#include "kernels/optim.h"

#include <cmath>

#include "kernels/cpu/cpu_common.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 16384;

bool skip_step(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

}  // namespace

void sgd_step(const Context& ctx, int64_t n, float* param, const float* grad, float* momentum_buf,
              const SgdParams& p, const float* found_inf) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "sgd_step: negative size ", n);
  FRUGAL_CHECK(p.momentum == 0 || momentum_buf != nullptr || n == 0, "sgd_step: momentum ",
               p.momentum, " needs a momentum buffer");
  FRUGAL_CHECK(!p.nesterov || (p.momentum > 0 && p.dampening == 0),
               "sgd_step: nesterov needs momentum > 0 and dampening 0 (momentum ", p.momentum,
               ", dampening ", p.dampening, ")");
  if (skip_step(found_inf)) return;
  const float lr = p.lr_device != nullptr ? *p.lr_device : static_cast<float>(p.lr);
  const float wd = static_cast<float>(p.weight_decay);
  const float mom = static_cast<float>(p.momentum);
  const float keep = static_cast<float>(1.0 - p.dampening);
  const bool use_mom = p.momentum != 0, first = p.first_step, nesterov = p.nesterov;
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float g = grad[i];
      if (wd != 0.0f) g += wd * param[i];
      if (use_mom) {
        float buf = first ? g : mom * momentum_buf[i] + keep * g;
        momentum_buf[i] = buf;
        g = nesterov ? g + mom * buf : buf;
      }
      param[i] -= lr * g;
    }
  });
}

void sgd_step_many(const Context& ctx, int64_t count, float* const* params,
                   const float* const* grads, float* const* momentum_bufs, const int64_t* sizes,
                   const SgdParams& p, const float* found_inf) {
  FRUGAL_CHECK(count >= 0, "sgd_step_many: negative count ", count);
  for (int64_t t = 0; t < count; ++t) {
    cpu::sgd_step(ctx, sizes[t], params[t], grads[t],
                  momentum_bufs != nullptr ? momentum_bufs[t] : nullptr, p, found_inf);
  }
}

void adamw_step(const Context& ctx, int64_t n, float* param, const float* grad, float* exp_avg,
                float* exp_avg_sq, const AdamWParams& p, const float* found_inf) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "adamw_step: negative size ", n);
  if (skip_step(found_inf)) return;
  const double t =
      p.step_count != nullptr ? static_cast<double>(*p.step_count) : static_cast<double>(p.step);
  FRUGAL_CHECK(t >= 1, "adamw_step: step ", t, " must be 1-based and positive");
  const double lr = p.lr_device != nullptr ? static_cast<double>(*p.lr_device) : p.lr;
  const float decay = static_cast<float>(1.0 - lr * p.weight_decay);
  const float b2 = static_cast<float>(p.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - p.beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - p.beta2);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(p.beta1, t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(p.beta2, t)));
  const float eps = static_cast<float>(p.eps);
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i];
      float m = exp_avg[i] + one_minus_b1 * (g - exp_avg[i]);  // lerp, as PyTorch writes it
      float v = b2 * exp_avg_sq[i] + one_minus_b2 * g * g;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      float denom = std::sqrt(v) / bc2_sqrt + eps;
      param[i] = param[i] * decay - step_size * m / denom;
    }
  });
}

}  // namespace frugal::kernels::cpu
