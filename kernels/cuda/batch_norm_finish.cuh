// Batch norm's per-channel finish: from the sums over the partial rows of the row splits to the
// statistics (forward) or dgamma, dbeta and dx's coefficients (backward), in a kernel of its own
// after the partial kernel, one warp a channel.
//
// Note [Finishes as kernels of their own]
// In a replayed MobileNetV2 f16 step at batch 128, 224x224, the 104 finishes cost 0.44 ms of 9.75
// (H200: 9.31 ms with them left out). Finishing in the partial kernel's last blocks instead (each
// block counting itself in on a counter when its partial row was written, the last of each group
// of splits summing the group, the last group finishing; PyTorch's channels-last batch norm works
// so) was slower: the two rounds of fences, atomics and dependent L2 reads made each partial
// kernel 3-5 us longer (ncu), more than the launch they saved. Replayed, in one build with the
// finish chosen at run time: MobileNetV2 f16 13,442 img/s against 13,831 with these kernels,
// 114,264 against 127,449 at 32x32 (batch 256), EfficientNet-B0 f16 7,146 against 7,251.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace frugal::kernels::cuda {
namespace {

// Per channel: batch statistics, saved statistics and running statistics (PyTorch's momentum
// rule, unbiased variance for the running estimate); channel 0 also counts the batch in
// batches_tracked (nullable). The sums are of x - x[0, c] and its square.
template <typename T>
struct ForwardFinish {
  int64_t rows;
  const T* x;
  double eps, momentum;
  float *save_mean, *save_invstd, *running_mean, *running_var;
  int64_t* batches_tracked;

  struct Loaded {
    float shift, old_mean, old_var;
  };
  // Note [Finish loads first]: the per-channel numbers load before the splits are summed, so
  // their latency (x's first row is usually out of L2 by now) runs beside the sums' instead of
  // after them.
  __device__ __forceinline__ Loaded load(int64_t ch) const {
    return {to_f(x[ch]), running_mean != nullptr ? running_mean[ch] : 0.0f,
            running_var != nullptr ? running_var[ch] : 0.0f};
  }
  __device__ __forceinline__ void store(int64_t ch, const Loaded& l, double a, double b) const {
    if (ch == 0 && batches_tracked != nullptr) *batches_tracked += 1;
    const double m = static_cast<double>(rows);
    const double shifted_mean = a / m;
    const double var = fmax(b / m - shifted_mean * shifted_mean, 0.0);  // biased
    const double mean = static_cast<double>(l.shift) + shifted_mean;
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = static_cast<float>(1.0 / sqrt(var + eps));
    if (running_mean != nullptr) {
      running_mean[ch] = static_cast<float>((1 - momentum) * l.old_mean + momentum * mean);
    }
    if (running_var != nullptr) {
      const double unbiased = var * m / (m - 1.0);
      running_var[ch] = static_cast<float>((1 - momentum) * l.old_var + momentum * unbiased);
    }
  }
};

// Per channel: dgamma, dbeta (both nullable) and the coefficients [3, C] of
// dx = k1 * (dy - k2 - (x - mean) * k3). The sums are of dy and dy * (x - mean).
struct BackwardFinish {
  int64_t rows, c;
  const float *gamma, *invstd;
  float *dgamma, *dbeta, *coef;

  struct Loaded {
    double is, g;
  };
  __device__ __forceinline__ Loaded load(int64_t ch) const {  // Note [Finish loads first]
    return {invstd[ch], gamma != nullptr ? gamma[ch] : 1.0};
  }
  __device__ __forceinline__ void store(int64_t ch, const Loaded& l, double sum_dy,
                                        double sum_dy_xmu) const {
    if (dgamma != nullptr) dgamma[ch] = static_cast<float>(sum_dy_xmu * l.is);
    if (dbeta != nullptr) dbeta[ch] = static_cast<float>(sum_dy);
    const double m = static_cast<double>(rows);
    coef[ch] = static_cast<float>(l.g * l.is);
    coef[c + ch] = static_cast<float>(sum_dy / m);
    coef[2 * c + ch] = static_cast<float>(l.is * l.is * sum_dy_xmu / m);
  }
};

// Loads a lane of the finish kernel issues before it adds them. With one in flight the finishes
// of MobileNetV1's bf16 step waited on L2 once per split a lane walked, 9.5 us a launch (54
// launches, 0.51 ms of a 9.5 ms step, H200); with split_sums.cuh's 4, a partial grid of 1,024
// splits still cost a lane 8 round trips, and each finish about 8 us (104 launches, 0.81 ms of
// MobileNetV2's f16 step). 16 make those 2; the loads are of pairs, 32 registers.
constexpr int kChannelSplitLoads = 16;

// The finish as a kernel of its own: one warp per channel, whose lanes sum the splits of
// partial [splits, C, 2] in double, kChannelSplitLoads loads in flight.
template <class Finish>
__global__ void finish_kernel(int64_t c, int splits, const float* partial, Finish finish) {
  constexpr int kWarps = kThreads / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (ch >= c) return;
  const auto loaded = finish.load(ch);
  double a = 0.0, b = 0.0;
  for (int g0 = lane; g0 < splits; g0 += 32 * kChannelSplitLoads) {
    float2 v[kChannelSplitLoads];
#pragma unroll
    for (int u = 0; u < kChannelSplitLoads; ++u) {
      const int64_t g = g0 + 32 * u;
      // (sum, moment) pairs: 8-byte aligned as the workspace is
      v[u] = g < splits ? *reinterpret_cast<const float2*>(partial + (g * c + ch) * 2)
                        : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kChannelSplitLoads; ++u) a += v[u].x, b += v[u].y;
  }
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if (lane == 0) finish.store(ch, loaded, a, b);
}

}  // namespace
}  // namespace frugal::kernels::cuda
