// Batch norm's per-channel finish: from the sums over the partial rows of the row splits to the
// statistics (forward) or dgamma, dbeta and dx's coefficients (backward). It runs in the last
// block of the partial kernel (Note [Finishing in the last block] in arrival_counters.cu), or,
// where no arrival counters are to be had, as a kernel of its own, one warp a channel.
#pragma once

#include "kernels/cuda/arrival_counters.h"
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

// How the partial kernel's last blocks sum a column's partial rows (Note [Finishing in the last
// block]): the splits in groups of `group`; the last block of each group to arrive sums the
// group's rows into group_sums [groups, C, 2] (double), and the last group to be summed adds the
// groups and finishes. Two levels keep each last block's reads short: at most kMaxGroupRows rows
// of at most kThreads channels (the partial kernel's columns are that narrow).
struct SplitTree {
  int* counters = nullptr;  // [columns][groups + 1], zero; null: the finish is its own kernel
  double* group_sums = nullptr;
  int group = 1, groups = 1;
};
constexpr int kMaxGroupRows = 32;

// Rows [first, end) of pairs at p + row * stride, summed in order in double, `Loads` loads in
// flight.
template <int Loads, typename Pair>
__device__ __forceinline__ void sum_pair_rows(const Pair* p, int64_t stride, int first, int end,
                                              double* a, double* b) {
  for (int r0 = first; r0 < end; r0 += Loads) {
    Pair v[Loads];
#pragma unroll
    for (int u = 0; u < Loads; ++u) v[u] = r0 + u < end ? __ldcg(p + (r0 + u) * stride) : Pair{};
#pragma unroll
    for (int u = 0; u < Loads; ++u) *a += v[u].x, *b += v[u].y;
  }
}

// The tail of the partial kernel, in every thread of each block once its partial row
// [blockIdx.y, col0 .. col0 + chans) is written.
template <class Finish>
__device__ __forceinline__ void finish_in_last_block(int64_t c, int64_t col0, int chans,
                                                     const float* partial, const SplitTree& tree,
                                                     const Finish& finish) {
  int* counters = tree.counters + static_cast<int64_t>(blockIdx.x) * (tree.groups + 1);
  const int g = static_cast<int>(blockIdx.y) / tree.group;
  const int first = g * tree.group;
  const int end = min(static_cast<int>(gridDim.y), first + tree.group);
  if (!last_to_arrive(counters + g, end - first)) return;
  const int k = static_cast<int>(threadIdx.x);
  if (k < chans) {
    double a = 0.0, b = 0.0;
    sum_pair_rows<16>(reinterpret_cast<const float2*>(partial) + col0 + k, c, first, end, &a, &b);
    reinterpret_cast<double2*>(tree.group_sums)[g * c + col0 + k] = make_double2(a, b);
  }
  if (!last_to_arrive(counters + tree.groups, tree.groups)) return;
  if (k < chans) {
    const int64_t ch = col0 + k;
    const auto loaded = finish.load(ch);
    double a = 0.0, b = 0.0;
    sum_pair_rows<8>(reinterpret_cast<const double2*>(tree.group_sums) + ch, c, 0, tree.groups, &a,
                     &b);
    finish.store(ch, loaded, a, b);
  }
}

}  // namespace
}  // namespace frugal::kernels::cuda
