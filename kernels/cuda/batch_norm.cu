// Batch normalisation over NHWC rows [rows, C] on CUDA. Per-channel sums run in two stages: a
// partial kernel (32 channels x 8 rows a block, float sums over a slice of rows, shifted by the
// first row for the variance) and a per-channel finish in double; then an elementwise pass.
// x/y/dx/dy are f32/f16/bf16, parameters and statistics are f32.
#include "kernels/batch_norm.h"
#include "kernels/cuda/cuda_common.cuh"

namespace frugal::kernels::cuda {
namespace {

// One block sums 32 channels over the rows of split blockIdx.y:
//   forward:  a = x - x[0, c], b = (x - x[0, c])^2
//   backward: a = dy,          b = dy * (x - mean[c])
// and writes partial[(split * C + c) * 2 + {0, 1}].
template <typename T, bool kBackward>
__global__ void channel_partial_kernel(int64_t rows, int64_t c, const T* x, const T* dy,
                                       const float* mean, float* partial) {
  __shared__ float sa[8][33], sb[8][33];
  int64_t ch = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float a = 0.0f, b = 0.0f;
  if (ch < c) {
    float center = kBackward ? mean[ch] : to_f(x[ch]);
    int64_t step = static_cast<int64_t>(gridDim.y) * 8;
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < rows; r += step) {
      float d = to_f(x[r * c + ch]) - center;
      if (kBackward) {
        float g = to_f(dy[r * c + ch]);
        a += g;
        b += g * d;
      } else {
        a += d;
        b += d * d;
      }
    }
  }
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    for (int i = 1; i < 8; ++i) {
      a += sa[i][threadIdx.x];
      b += sb[i][threadIdx.x];
    }
    int64_t slot = (static_cast<int64_t>(blockIdx.y) * c + ch) * 2;
    partial[slot] = a;
    partial[slot + 1] = b;
  }
}

// Per channel: batch statistics, saved statistics and running statistics (PyTorch's momentum
// rule, unbiased variance for the running estimate).
template <typename T>
__global__ void forward_finish_kernel(int64_t rows, int64_t c, int splits, const float* partial,
                                      const T* x, double eps, double momentum, float* save_mean,
                                      float* save_invstd, float* running_mean,
                                      float* running_var) {
  for (int64_t ch = thread_index(); ch < c; ch += grid_stride()) {
    double a = 0.0, b = 0.0;
    for (int g = 0; g < splits; ++g) {
      a += partial[(g * c + ch) * 2];
      b += partial[(g * c + ch) * 2 + 1];
    }
    double m = static_cast<double>(rows);
    double shifted_mean = a / m;
    double var = fmax(b / m - shifted_mean * shifted_mean, 0.0);  // biased
    double mean = static_cast<double>(to_f(x[ch])) + shifted_mean;
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = static_cast<float>(1.0 / sqrt(var + eps));
    if (running_mean != nullptr) {
      running_mean[ch] = static_cast<float>((1 - momentum) * running_mean[ch] + momentum * mean);
    }
    if (running_var != nullptr) {
      double unbiased = var * m / (m - 1.0);
      running_var[ch] = static_cast<float>((1 - momentum) * running_var[ch] + momentum * unbiased);
    }
  }
}

// y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c]; invstd comes from `var` + eps when
// `var` is given (evaluation), else from `invstd`. gamma/beta may be null (1 and 0).
template <typename T>
__global__ void normalize_kernel(int64_t n, int64_t c, const T* x, const float* mean,
                                 const float* invstd, const float* var, float eps,
                                 const float* gamma, const float* beta, T* y) {
  int64_t stride = grid_stride();
  int64_t stride_c = stride % c;
  int64_t i = thread_index();
  int64_t ch = i % c;  // advanced incrementally: one division per thread, not per element
  for (; i < n; i += stride) {
    float is = var != nullptr ? 1.0f / sqrtf(var[ch] + eps) : invstd[ch];
    float g = gamma != nullptr ? gamma[ch] : 1.0f;
    float b = beta != nullptr ? beta[ch] : 0.0f;
    y[i] = from_f<T>((to_f(x[i]) - mean[ch]) * (is * g) + b);
    ch += stride_c;
    if (ch >= c) ch -= c;
  }
}

// Per channel: dgamma, dbeta and the coefficients of dx = k1 * (dy - k2 - (x - mean) * k3).
__global__ void backward_finish_kernel(int64_t rows, int64_t c, int splits, const float* partial,
                                       const float* gamma, const float* invstd, float* dgamma,
                                       float* dbeta, float* coef) {
  for (int64_t ch = thread_index(); ch < c; ch += grid_stride()) {
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    for (int g = 0; g < splits; ++g) {
      sum_dy += partial[(g * c + ch) * 2];
      sum_dy_xmu += partial[(g * c + ch) * 2 + 1];
    }
    double is = invstd[ch];
    if (dgamma != nullptr) dgamma[ch] = static_cast<float>(sum_dy_xmu * is);
    if (dbeta != nullptr) dbeta[ch] = static_cast<float>(sum_dy);
    double m = static_cast<double>(rows);
    double g = gamma != nullptr ? gamma[ch] : 1.0;
    coef[ch] = static_cast<float>(g * is);
    coef[c + ch] = static_cast<float>(sum_dy / m);
    coef[2 * c + ch] = static_cast<float>(is * is * sum_dy_xmu / m);
  }
}

template <typename T>
__global__ void backward_dx_kernel(int64_t n, int64_t c, const T* x, const T* dy,
                                   const float* mean, const float* coef, T* dx) {
  int64_t stride = grid_stride();
  int64_t stride_c = stride % c;
  int64_t i = thread_index();
  int64_t ch = i % c;
  for (; i < n; i += stride) {
    float v = coef[ch] * (to_f(dy[i]) - coef[c + ch] - (to_f(x[i]) - mean[ch]) * coef[2 * c + ch]);
    dx[i] = from_f<T>(v);
    ch += stride_c;
    if (ch >= c) ch -= c;
  }
}

// Splits of the row range so that the partial kernel fills the device a few times over while
// each thread still sums a useful run of rows.
int row_splits(const Context& ctx, int64_t rows, int64_t c) {
  int64_t blocks_x = (c + 31) / 32;
  int64_t target = int64_t{sm_count(ctx.device.index)} * 4;
  int64_t by_rows = (rows + 8 * 32 - 1) / (8 * 32);
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({target / blocks_x, by_rows, 1024})));
}

void check_common(const Context& ctx, DType dtype, int64_t rows, int64_t c, const char* op) {
  stream_of(ctx, op);
  FRUGAL_CHECK(dtype != DType::f64, op, ": f64 is CPU-only");
  FRUGAL_CHECK(rows >= 0 && c >= 0 && (c + 31) / 32 <= INT32_MAX, op, ": bad shape [", rows,
               ", ", c, "]");
}

}  // namespace

void batch_norm_forward_train(const Context& ctx, DType dtype, int64_t rows, int64_t c,
                              const void* x, const void* gamma, const void* beta, double eps,
                              double momentum, void* y, void* save_mean, void* save_invstd,
                              void* running_mean, void* running_var) {
  const char* op = "batch_norm_forward_train";
  check_common(ctx, dtype, rows, c, op);
  if (c == 0) return;
  FRUGAL_CHECK(rows > 1, op, ": need more than one value per channel in training, got [", rows,
               ", ", c, "]");
  DeviceGuard guard(ctx.device);
  cudaStream_t s = stream_of(ctx, op);
  int splits = row_splits(ctx, rows, c);
  // partial sums [splits, C, 2], then room for mean and invstd [2, C] when the caller saves none
  memory::DataPtr ws =
      ctx.workspace((static_cast<size_t>(splits) * c * 2 + 2 * static_cast<size_t>(c)) *
                    sizeof(float));
  auto partial = static_cast<float*>(ws.get());
  float* scratch = partial + static_cast<int64_t>(splits) * c * 2;
  auto mean = save_mean != nullptr ? static_cast<float*>(save_mean) : scratch;
  auto invstd = save_invstd != nullptr ? static_cast<float*>(save_invstd) : scratch + c;
  dim3 grid(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(splits));
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    auto xt = static_cast<const T*>(x);
    channel_partial_kernel<T, false><<<grid, dim3(32, 8), 0, s>>>(rows, c, xt, nullptr, nullptr,
                                                                 partial);
    FRUGAL_LAUNCH_CHECK();
    forward_finish_kernel<T><<<grid_for(ctx, c), kThreads, 0, s>>>(
        rows, c, splits, partial, xt, eps, momentum, mean, invstd,
        static_cast<float*>(running_mean), static_cast<float*>(running_var));
    FRUGAL_LAUNCH_CHECK();
    normalize_kernel<T><<<grid_for(ctx, rows * c), kThreads, 0, s>>>(
        rows * c, c, xt, mean, invstd, nullptr, 0.0f, static_cast<const float*>(gamma),
        static_cast<const float*>(beta), static_cast<T*>(y));
    FRUGAL_LAUNCH_CHECK();
  });
}

void batch_norm_forward_eval(const Context& ctx, DType dtype, int64_t rows, int64_t c,
                             const void* x, const void* gamma, const void* beta,
                             const void* running_mean, const void* running_var, double eps,
                             void* y) {
  const char* op = "batch_norm_forward_eval";
  check_common(ctx, dtype, rows, c, op);
  if (rows == 0 || c == 0) return;
  DeviceGuard guard(ctx.device);
  cudaStream_t s = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    normalize_kernel<T><<<grid_for(ctx, rows * c), kThreads, 0, s>>>(
        rows * c, c, static_cast<const T*>(x), static_cast<const float*>(running_mean), nullptr,
        static_cast<const float*>(running_var), static_cast<float>(eps),
        static_cast<const float*>(gamma), static_cast<const float*>(beta), static_cast<T*>(y));
    FRUGAL_LAUNCH_CHECK();
  });
}

void batch_norm_backward(const Context& ctx, DType dtype, int64_t rows, int64_t c, const void* x,
                         const void* dy, const void* gamma, const void* save_mean,
                         const void* save_invstd, void* dx, void* dgamma, void* dbeta) {
  const char* op = "batch_norm_backward";
  check_common(ctx, dtype, rows, c, op);
  if (c == 0) return;
  DeviceGuard guard(ctx.device);
  cudaStream_t s = stream_of(ctx, op);
  int splits = row_splits(ctx, rows, c);
  memory::DataPtr ws =
      ctx.workspace((static_cast<size_t>(splits) * c * 2 + 3 * static_cast<size_t>(c)) *
                    sizeof(float));
  auto partial = static_cast<float*>(ws.get());
  float* coef = partial + static_cast<int64_t>(splits) * c * 2;  // [3, C]
  auto mean = static_cast<const float*>(save_mean);
  dim3 grid(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(splits));
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    auto xt = static_cast<const T*>(x);
    auto dyt = static_cast<const T*>(dy);
    channel_partial_kernel<T, true><<<grid, dim3(32, 8), 0, s>>>(rows, c, xt, dyt, mean,
                                                                partial);
    FRUGAL_LAUNCH_CHECK();
    backward_finish_kernel<<<grid_for(ctx, c), kThreads, 0, s>>>(
        rows, c, splits, partial, static_cast<const float*>(gamma),
        static_cast<const float*>(save_invstd), static_cast<float*>(dgamma),
        static_cast<float*>(dbeta), coef);
    FRUGAL_LAUNCH_CHECK();
    if (dx != nullptr && rows > 0) {
      backward_dx_kernel<T><<<grid_for(ctx, rows * c), kThreads, 0, s>>>(
          rows * c, c, xt, dyt, mean, coef, static_cast<T*>(dx));
      FRUGAL_LAUNCH_CHECK();
    }
  });
}

}  // namespace frugal::kernels::cuda
