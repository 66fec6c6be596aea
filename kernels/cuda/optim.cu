// Fused SGD and AdamW updates over f32 parameters on CUDA, term by term as the CPU twins
// (kernels/cpu/optim.cpp, PyTorch's single-tensor formulas). The loss scaler's found_inf flag is
// read on the device: a non-zero flag makes every thread return, so no host sync is needed.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/optim.h"

namespace frugal::kernels::cuda {
namespace {

struct SgdConsts {
  float lr, wd, mom, keep;
  bool use_mom, first, nesterov;
  const float* lr_device;  // overrides lr when set
};

// Elements begin, begin + stride, ... below n.
__device__ __forceinline__ void sgd_kernel_body(int64_t n, int64_t begin, int64_t stride,
                                                float* param, const float* grad,
                                                float* momentum_buf, const SgdConsts& k,
                                                const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const float lr = k.lr_device != nullptr ? *k.lr_device : k.lr;
  for (int64_t i = begin; i < n; i += stride) {
    float g = grad[i];
    if (k.wd != 0.0f) g += k.wd * param[i];
    if (k.use_mom) {
      float buf = k.first ? g : k.mom * momentum_buf[i] + k.keep * g;
      momentum_buf[i] = buf;
      g = k.nesterov ? g + k.mom * buf : buf;
    }
    param[i] -= lr * g;
  }
}

__global__ void sgd_kernel(int64_t n, float* param, const float* grad, float* momentum_buf,
                           SgdConsts k, const float* found_inf) {
  sgd_kernel_body(n, thread_index(), grid_stride(), param, grad, momentum_buf, k, found_inf);
}

// Note [Multi-tensor lists] in cuda_common.cuh (1,156 bytes of parameters).
struct SgdList {
  float* param[kListMax];
  const float* grad[kListMax];
  float* buf[kListMax];
  int64_t n[kListMax];
  ListBlocks blocks;
};

__global__ void sgd_many_kernel(SgdList list, SgdConsts k, const float* found_inf) {
  const ListSlice at = list_slice(list.blocks);
  sgd_kernel_body(list.n[at.t], at.begin, at.stride, list.param[at.t], list.grad[at.t],
                  list.buf[at.t], k, found_inf);
}

struct AdamWConsts {
  float decay, b2, one_minus_b1, one_minus_b2, step_size, bc2_sqrt, eps;
  // For step size and decay when the step count or the learning rate is on the device.
  double lr, beta1, beta2, weight_decay, step;
  const float* lr_device;
};

__global__ void adamw_kernel(int64_t n, float* param, const float* grad, float* exp_avg,
                             float* exp_avg_sq, AdamWConsts k, const float* found_inf,
                             const float* step_count) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  if (step_count != nullptr || k.lr_device != nullptr) {  // the host path's double formulas
    const double t = step_count != nullptr ? static_cast<double>(*step_count) : k.step;
    const double lr = k.lr_device != nullptr ? static_cast<double>(*k.lr_device) : k.lr;
    k.step_size = static_cast<float>(lr / (1.0 - pow(k.beta1, t)));
    k.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(k.beta2, t)));
    k.decay = static_cast<float>(1.0 - lr * k.weight_decay);
  }
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    float g = grad[i];
    float m = exp_avg[i] + k.one_minus_b1 * (g - exp_avg[i]);  // lerp, as PyTorch writes it
    float v = k.b2 * exp_avg_sq[i] + k.one_minus_b2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    float denom = sqrtf(v) / k.bc2_sqrt + k.eps;
    param[i] = param[i] * k.decay - k.step_size * m / denom;
  }
}

void check_sgd(const SgdParams& p, const char* op) {
  FRUGAL_CHECK(!p.nesterov || (p.momentum > 0 && p.dampening == 0), op,
               ": nesterov needs momentum > 0 and dampening 0 (momentum ", p.momentum,
               ", dampening ", p.dampening, ")");
}

SgdConsts sgd_consts(const SgdParams& p) {
  return {static_cast<float>(p.lr),
          static_cast<float>(p.weight_decay),
          static_cast<float>(p.momentum),
          static_cast<float>(1.0 - p.dampening),
          p.momentum != 0,
          p.first_step,
          p.nesterov,
          p.lr_device};
}

}  // namespace

void sgd_step(const Context& ctx, int64_t n, float* param, const float* grad, float* momentum_buf,
              const SgdParams& p, const float* found_inf) {
  cudaStream_t s = stream_of(ctx, "sgd_step");
  FRUGAL_CHECK(n >= 0, "sgd_step: negative size ", n);
  FRUGAL_CHECK(p.momentum == 0 || momentum_buf != nullptr || n == 0, "sgd_step: momentum ",
               p.momentum, " needs a momentum buffer");
  check_sgd(p, "sgd_step");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  sgd_kernel<<<grid_for(ctx, n), kThreads, 0, s>>>(n, param, grad, momentum_buf, sgd_consts(p),
                                                   found_inf);
  FRUGAL_LAUNCH_CHECK();
}

void sgd_step_many(const Context& ctx, int64_t count, float* const* params,
                   const float* const* grads, float* const* momentum_bufs, const int64_t* sizes,
                   const SgdParams& p, const float* found_inf) {
  const char* op = "sgd_step_many";
  cudaStream_t s = stream_of(ctx, op);
  check_sgd(p, op);
  DeviceGuard guard(ctx.device);
  const SgdConsts k = sgd_consts(p);
  for_each_tensor_list<SgdList>(
      ctx, op, count, sizes,
      [&](SgdList& list, int slot, int64_t t) {
        float* buf = momentum_bufs != nullptr ? momentum_bufs[t] : nullptr;
        FRUGAL_CHECK(p.momentum == 0 || buf != nullptr, op, ": momentum ", p.momentum,
                     " needs a momentum buffer for tensor ", t);
        list.param[slot] = params[t];
        list.grad[slot] = grads[t];
        list.buf[slot] = buf;
      },
      [&](const SgdList& list, unsigned blocks) {
        sgd_many_kernel<<<blocks, kThreads, 0, s>>>(list, k, found_inf);
      });
}

void adamw_step(const Context& ctx, int64_t n, float* param, const float* grad, float* exp_avg,
                float* exp_avg_sq, const AdamWParams& p, const float* found_inf) {
  cudaStream_t s = stream_of(ctx, "adamw_step");
  FRUGAL_CHECK(n >= 0, "adamw_step: negative size ", n);
  FRUGAL_CHECK(p.step_count != nullptr || p.step >= 1, "adamw_step: step ", p.step,
               " must be 1-based and positive");
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  auto t = static_cast<double>(std::max<int64_t>(p.step, 1));
  AdamWConsts k{static_cast<float>(1.0 - p.lr * p.weight_decay),
                static_cast<float>(p.beta2),
                static_cast<float>(1.0 - p.beta1),
                static_cast<float>(1.0 - p.beta2),
                static_cast<float>(p.lr / (1.0 - std::pow(p.beta1, t))),
                static_cast<float>(std::sqrt(1.0 - std::pow(p.beta2, t))),
                static_cast<float>(p.eps),
                p.lr,
                p.beta1,
                p.beta2,
                p.weight_decay,
                t,
                p.lr_device};
  adamw_kernel<<<grid_for(ctx, n), kThreads, 0, s>>>(n, param, grad, exp_avg, exp_avg_sq, k,
                                                     found_inf, p.step_count);
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace frugal::kernels::cuda
