// What frugal's own NHWC convolution kernels share (depthwise_*.cu, few_channel_conv.cu): the
// 32-bit geometry, and the two-stage weight gradient (row splits of the output positions summed
// into an f32 workspace, then the splits added in a fixed order: deterministic, no atomics).
#pragma once

#include <algorithm>

#include "kernels/conv.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/split_sums.cuh"

namespace frugal::kernels::cuda {

// 32-bit geometry (the callers' *_handles() checked that every index fits). c counts input
// channels, k output channels.
struct Geom {
  int n, h, w, c, k, oh, ow, sh, sw, ph, pw, dh, dw;
};

inline Geom geom_of(const Conv2dShape& s) {
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return {i(s.n),        i(s.h),        i(s.w),     i(s.c),     i(s.k),     i(s.oh()), i(s.ow()),
          i(s.stride_h), i(s.stride_w), i(s.pad_h), i(s.pad_w), i(s.dil_h), i(s.dil_w)};
}

// Row splits of the weight gradient's output positions: enough blocks to fill the device a few
// times over, each thread still summing a run of positions (several independent tap loads each).
constexpr int64_t kPositionsPerThread = 8;

inline int weight_splits(const Context& ctx, int64_t blocks_x, int64_t positions, int rows) {
  int64_t target = int64_t{sm_count(ctx.device.index)} * 4;
  int64_t by_positions =
      (positions + int64_t{rows} * kPositionsPerThread - 1) / (int64_t{rows} * kPositionsPerThread);
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({target / std::max<int64_t>(blocks_x, 1), by_positions, 1024})));
}

// The finish for n weights from inputs of type T, stored as T or, when dw_dtype is f32, as f32:
// the splits added in order (Note [Split sums]).
template <typename T>
void finish_weight_gradient(const Context& ctx, cudaStream_t stream, int64_t n, int splits,
                            const float* partial, DType dw_dtype, void* dw) {
  if (dw_dtype == DType::f32) {
    sum_splits<float>(ctx, stream, n, splits, partial, 1.0f, static_cast<float*>(dw));
  } else {
    sum_splits<float>(ctx, stream, n, splits, partial, 1.0f, static_cast<T*>(dw));
  }
}

}  // namespace frugal::kernels::cuda
