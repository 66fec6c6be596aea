// The second stage of a reduction split across blocks: y[i] = scale * sum over splits s of
// partial[s, i], the splits added in a fixed order (deterministic, no atomics). The direct
// convolutions' weight gradients (direct_conv_common.cuh) and sum_to (reduce.cu) finish with it.
//
// Note [Split sums]: one thread a sum that walks all splits alone is slow where the outputs are
// few and the splits many: 288 depthwise weights (32 channels, 3x3) over 528 splits were two
// blocks doing 528 dependent loads a thread, and 14x14x512's depthwise weight gradient took
// 0.12 ms for 51 MB of activations (H200). A block instead takes `lanes` outputs, and its
// kThreads / lanes groups of threads add splits g, g + groups, ... of them; then the groups' sums
// are added in group order. Groups are as many as the splits (a power of two, at most 32) so that
// few splits keep the block's threads on many outputs; the order depends on the split count only.
#pragma once

#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"

namespace frugal::kernels::cuda {

// Loads a thread issues before adding them, when it walks splits: an add waits for its load, so
// one load at a time costs the L2's latency once per split walked.
constexpr int kSplitLoads = 4;

// Acc is float for the convolutions' weight gradients, double for sum_to (whose finish adds in
// double, as its single-block path does).
template <typename Acc, typename Out>
__global__ void __launch_bounds__(kThreads)
    sum_splits_kernel(int64_t n, int splits, int lanes, const float* __restrict__ partial,
                      Acc scale, Out* __restrict__ y) {
  __shared__ Acc sums[kThreads];
  const int groups = kThreads / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const int group = static_cast<int>(threadIdx.x) / lanes;
  // The whole block walks the same chunks, so its barriers are reached by every thread.
  for (int64_t i0 = static_cast<int64_t>(blockIdx.x) * lanes; i0 < n;
       i0 += static_cast<int64_t>(gridDim.x) * lanes) {
    const int64_t i = i0 + lane;
    Acc sum = 0;
    if (i < n) {
      for (int s0 = group; s0 < splits; s0 += groups * kSplitLoads) {
        float v[kSplitLoads];
#pragma unroll
        for (int u = 0; u < kSplitLoads; ++u) {
          const int s = s0 + groups * u;
          v[u] = s < splits ? partial[s * n + i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kSplitLoads; ++u) sum += v[u];
      }
    }
    sums[group * lanes + lane] = sum;
    __syncthreads();
    if (group == 0 && i < n) {
      Acc total = 0;
      for (int g = 0; g < groups; ++g) total += sums[g * lanes + lane];
      y[i] = from_f<Out>(static_cast<float>(scale * total));
    }
    __syncthreads();
  }
}

// Launches sum_splits_kernel on `stream` for n outputs of `splits` partial rows.
template <typename Acc, typename Out>
void sum_splits(const Context& ctx, cudaStream_t stream, int64_t n, int splits,
                const float* partial, Acc scale, Out* y) {
  int groups = 1;
  while (groups < std::min(splits, 32)) groups *= 2;
  const int lanes = kThreads / groups;
  sum_splits_kernel<Acc, Out><<<grid_for(ctx, (n + lanes - 1) / lanes, 1), kThreads, 0, stream>>>(
      n, splits, lanes, partial, scale, y);
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace frugal::kernels::cuda
