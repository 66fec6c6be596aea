// Softmax cross-entropy with label smoothing on CUDA, f32 logits [N, C] (autocast runs losses in
// f32). One warp per row for the forward (max, sum of exp, sum of logits); the backward is
// elementwise from the saved logsumexp. Labels outside [0, C) give NaN (no throw from a device).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/loss.h"

namespace frugal::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

__global__ void ce_forward_kernel(int64_t n, int64_t c, const float* logits, const int64_t* labels,
                                  float smoothing, float* loss, float* lse) {
  int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= n) return;
  const float* x = logits + row * c;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < c; j += 32) mx = fmaxf(mx, x[j]);
  mx = warp_max(mx);
  float sum_exp = 0.0f, sum_x = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += 32) {
    sum_exp += expf(x[j] - mx);
    sum_x += x[j];
  }
  sum_exp = warp_sum(sum_exp);
  sum_x = warp_sum(sum_x);
  if (threadIdx.x == 0) {
    float l = mx + logf(sum_exp);
    int64_t y = labels[row];
    // -log p_j = l - x_j; the smoothed term is its mean over the classes.
    float nll = (y >= 0 && y < c) ? l - x[y] : NAN;
    float smooth = l - sum_x / static_cast<float>(c);
    // Each term only where it counts, as the CPU's: a -inf logit makes `smooth` +inf, and
    // 0 * inf is NaN.
    loss[row] = smoothing == 0.0f   ? nll
                : smoothing == 1.0f ? smooth
                                    : (1.0f - smoothing) * nll + smoothing * smooth;
    lse[row] = l;
  }
}

__global__ void ce_backward_kernel(int64_t n, int64_t c, const float* logits, const int64_t* labels,
                                   float smoothing, const float* lse, const float* dloss,
                                   float* dlogits) {
  float off = smoothing / static_cast<float>(c);
  int64_t stride = grid_stride();
  int64_t stride_c = stride % c;
  int64_t i = thread_index();
  int64_t j = i % c;  // column, advanced incrementally
  for (; i < n * c; i += stride) {
    int64_t row = i / c;
    int64_t y = labels[row];
    float p = expf(logits[i] - lse[row]);
    float g = p - off - (j == y ? 1.0f - smoothing : 0.0f);
    dlogits[i] = (y >= 0 && y < c) ? dloss[row] * g : NAN;
    j += stride_c;
    if (j >= c) j -= c;
  }
}

void check_args(const Context& ctx, DType dtype, int64_t n, int64_t c, double smoothing,
                const char* op) {
  stream_of(ctx, op);
  check_f32(dtype, "logits", op);
  FRUGAL_CHECK(n >= 0 && c >= 0, op, ": bad logits size [", n, ", ", c, "]");
  FRUGAL_CHECK(n == 0 || c > 0, op, ": logits [", n, ", 0] have no classes");
  FRUGAL_CHECK(smoothing >= 0 && smoothing <= 1, op, ": label smoothing ", smoothing,
               " is outside [0, 1]");
}

}  // namespace

void cross_entropy_forward(const Context& ctx, DType dtype, int64_t n, int64_t c,
                           const void* logits, const int64_t* labels, double smoothing, void* loss,
                           void* lse) {
  const char* op = "cross_entropy_forward";
  check_args(ctx, dtype, n, c, smoothing, op);
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  cudaStream_t s = stream_of(ctx, op);
  auto blocks = static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock);
  ce_forward_kernel<<<blocks, dim3(32, kRowsPerBlock), 0, s>>>(
      n, c, static_cast<const float*>(logits), labels, static_cast<float>(smoothing),
      static_cast<float*>(loss), static_cast<float*>(lse));
  FRUGAL_LAUNCH_CHECK();
}

void cross_entropy_backward(const Context& ctx, DType dtype, int64_t n, int64_t c,
                            const void* logits, const int64_t* labels, double smoothing,
                            const void* lse, const void* dloss, void* dlogits) {
  const char* op = "cross_entropy_backward";
  check_args(ctx, dtype, n, c, smoothing, op);
  if (n == 0) return;
  DeviceGuard guard(ctx.device);
  cudaStream_t s = stream_of(ctx, op);
  ce_backward_kernel<<<grid_for(ctx, n * c), kThreads, 0, s>>>(
      n, c, static_cast<const float*>(logits), labels, static_cast<float>(smoothing),
      static_cast<const float*>(lse), static_cast<const float*>(dloss),
      static_cast<float*>(dlogits));
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace frugal::kernels::cuda
