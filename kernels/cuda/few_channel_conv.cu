// Weight gradient of 3x3 convolutions with at most 4 input channels (Note [Few-channel weight
// gradients] in few_channel_conv.h): a small GEMM per block over tiles of output positions staged
// in shared memory, row splits summed into an f32 workspace, then the splits added in order. And
// their forward (Note [Few-channel forwards]): a thread an output position, 32 sums in registers.
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/direct_conv_common.cuh"
#include "kernels/cuda/few_channel_conv.h"

namespace frugal::kernels::cuda {
namespace {

constexpr int kSize = kFewChannelSize;
constexpr int kTaps = kSize * kSize;
constexpr int kBlockChannels = 32;  // output channels a block: 8 lanes of a warp x 4 each
constexpr int kTile = 128;          // output positions a block stages at a time
constexpr int kWarps = kThreads / 32;
constexpr int kWarpPositions = kTile / kWarps;  // each warp sums its own run of the tile
// Resident blocks a multiprocessor (64 registers a thread): while one block waits for its tile's
// loads, the others sum theirs. With C = 4 the compiler otherwise took 73 registers, 3 blocks,
// and the partial kernel of MobileNet's stem shape with 4 channels 232 us instead of 187 (H200,
// f16; a few spilled bytes included).
constexpr int kBlocksPerSm = 4;
static_assert(kThreads == 2 * kTile, "the patch staging gives each position two threads");
static_assert(kTile % kWarps == 0);

// The shared-memory layout of one instance. m = tap * C + c runs over the M = 9C columns of the
// im2col patch (the OHWI order of dw); a lane sums 4 output channels x kChunk columns, so the
// columns are padded to 4 chunks (the padding is zero and its sums are dropped).
template <int C>
struct Tiles {
  static constexpr int kM = kTaps * C;
  static constexpr int kChunk = (kM + 3) / 4;
  static constexpr int kPadded = 4 * kChunk;
  // A patch row's stride: odd, so that the staging stores (one lane per position, same column)
  // fall in 32 different banks; the GEMM reads one row a warp, a broadcast either way.
  static constexpr int kRow = kPadded + 1;
  static constexpr int kDyFloats = kTile * kBlockChannels;         // [kTile][kBlockChannels]
  static constexpr int kStaged = kDyFloats + kTile * kRow;         // then the patch [kTile][kRow]
  static constexpr int kSums = kWarps * kBlockChannels * kPadded;  // [warp][channel][kPadded]
  static constexpr int kFloats = kStaged > kSums ? kStaged : kSums;
};
static_assert(Tiles<kFewChannelMaxInputs>::kFloats * sizeof(float) <= 48 * 1024,
              "static shared memory is capped at 48 KiB");

// dy_tile[p, j] = dy[p0 + p, k0 + j] in f32, zero past the last position or output channel.
// V channels a load: V > 1 only when K % V == 0 and dy is 16-byte aligned, so a pack that starts
// below K ends within it.
template <typename T, int V>
__device__ __forceinline__ void stage_dy(const Geom& g, int positions, int p0, int k0,
                                         const T* __restrict__ dy, float* dy_tile) {
  constexpr int kPacks = kBlockChannels / V;  // per position
  for (int e = static_cast<int>(threadIdx.x); e < kTile * kPacks; e += kThreads) {
    const int p = e / kPacks, j = e % kPacks * V;
    const int pos = p0 + p, k = k0 + j;
    float v[V];
    if (pos < positions && k < g.k) {
      const Pack<T, V> pack = load_pack<T, V>(dy + pos * g.k + k);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = to_f(pack.v[i]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = 0.0f;
    }
    float* out = dy_tile + p * kBlockChannels + j;
    if constexpr (V % 4 == 0) {
#pragma unroll
      for (int i = 0; i < V; i += 4) {
        *reinterpret_cast<float4*>(out + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) out[i] = v[i];
    }
  }
}

// patch[p, tap * C + c] = x[tap's input of position p0 + p, c] in f32 (the im2col row), zero in
// the padding and past the last position. Thread t stages position t % kTile, taps of parity
// t / kTile, so that the two divisions by the output size happen once a position.
template <typename T, int C>
__device__ __forceinline__ void stage_patch(const Geom& g, int positions, int p0,
                                            const T* __restrict__ x, float* patch) {
  const int p = static_cast<int>(threadIdx.x) % kTile;
  const int parity = static_cast<int>(threadIdx.x) / kTile;
  const int pos = p0 + p;
  const bool valid = pos < positions;
  const int ow = valid ? pos % g.ow : 0;
  const int rest = valid ? pos / g.ow : 0;
  const int oh = rest % g.oh, n = rest / g.oh;
  // 64 bits: oh * sh can pass INT_MAX where the padding is huge, though every in-range index fits
  const int64_t ih0 = int64_t{oh} * g.sh - g.ph, iw0 = int64_t{ow} * g.sw - g.pw;
  float* row = patch + p * Tiles<C>::kRow;
#pragma unroll
  for (int i = 0; i < (kTaps + 1) / 2; ++i) {
    const int tap = 2 * i + parity;
    if (tap < kTaps) {
      const int64_t ih = ih0 + int64_t{tap / kSize} * g.dh;
      const int64_t iw = iw0 + int64_t{tap % kSize} * g.dw;
      float v[C];
      if (valid && ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) {
        const T* src = x + ((n * g.h + static_cast<int>(ih)) * g.w + static_cast<int>(iw)) * C;
#pragma unroll
        for (int c = 0; c < C; ++c) v[c] = to_f(src[c]);
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) v[c] = 0.0f;
      }
#pragma unroll
      for (int c = 0; c < C; ++c) row[tap * C + c] = v[c];
    }
  }
}

// Block (blockIdx.x, split = blockIdx.y): output channels k0 = 32 * blockIdx.x onward, tiles
// split, split + splits, ... of the output positions. Writes
// partial[split, k, m] = sum over its positions p of dy[p, k] * patch[p, m] for k < K, m < M,
// the OHWI order of dw (finish_weight_gradient's [split][K * M]). Warp w sums positions
// [w * kWarpPositions, (w + 1) * kWarpPositions) of each tile; its lane owns channels
// k0 + 4 * (lane % 8) + [0, 4) and columns (lane / 8) * kChunk + [0, kChunk), kChunk x 4 sums in
// registers. The warps' sums are then added in warp order: no atomics, a fixed order.
template <typename T, int C, int V>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    few_channel_partial_kernel(Geom g, const T* __restrict__ x, const T* __restrict__ dy,
                               float* __restrict__ partial) {
  using L = Tiles<C>;
  __shared__ __align__(16) float smem[L::kFloats];
  float* dy_tile = smem;
  float* patch = smem + L::kDyFloats;
  const int t = static_cast<int>(threadIdx.x);
  const int warp = t / 32, lane = t % 32;
  const int quad = lane % 8, chunk = lane / 8;
  const int k0 = static_cast<int>(blockIdx.x) * kBlockChannels;
  const int positions = g.n * g.oh * g.ow;  // few_channel_handles: n * oh * ow * k fits
  const int tiles = (positions + kTile - 1) / kTile;

  // The padding columns stay zero: staging writes columns below M only.
  if constexpr (L::kPadded > L::kM) {
    constexpr int kPad = L::kPadded - L::kM;
    for (int i = t; i < kTile * kPad; i += kThreads) {
      patch[i / kPad * L::kRow + L::kM + i % kPad] = 0.0f;
    }
  }
  float acc[4][L::kChunk];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int j = 0; j < L::kChunk; ++j) acc[r][j] = 0.0f;
  }
  // The trip count depends on blockIdx only, so every thread reaches every barrier.
  for (int tile = static_cast<int>(blockIdx.y); tile < tiles; tile += static_cast<int>(gridDim.y)) {
    __syncthreads();  // the previous tile's reads are done
    stage_dy<T, V>(g, positions, tile * kTile, k0, dy, dy_tile);
    stage_patch<T, C>(g, positions, tile * kTile, x, patch);
    __syncthreads();
#pragma unroll 4
    for (int i = 0; i < kWarpPositions; ++i) {
      const int p = warp * kWarpPositions + i;
      const float4 d = *reinterpret_cast<const float4*>(dy_tile + p * kBlockChannels + 4 * quad);
      const float* xs = patch + p * L::kRow + chunk * L::kChunk;
#pragma unroll
      for (int j = 0; j < L::kChunk; ++j) {
        const float xv = xs[j];
        acc[0][j] = fmaf(d.x, xv, acc[0][j]);
        acc[1][j] = fmaf(d.y, xv, acc[1][j]);
        acc[2][j] = fmaf(d.z, xv, acc[2][j]);
        acc[3][j] = fmaf(d.w, xv, acc[3][j]);
      }
    }
  }

  __syncthreads();  // the tiles' last reads (and the padding's zeroing) are done: reuse smem
  float* sums = smem;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int j = 0; j < L::kChunk; ++j) {
      sums[(warp * kBlockChannels + 4 * quad + r) * L::kPadded + chunk * L::kChunk + j] = acc[r][j];
    }
  }
  __syncthreads();
  for (int o = t; o < kBlockChannels * L::kM; o += kThreads) {
    const int j = o / L::kM, m = o % L::kM;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += sums[(w * kBlockChannels + j) * L::kPadded + m];
    const int k = k0 + j;
    if (k < g.k) partial[(static_cast<int64_t>(blockIdx.y) * g.k + k) * L::kM + m] = sum;
  }
}

// Row splits: about kBlocksPerSm blocks a multiprocessor, each over at least kMinTiles tiles.
// More splits fill the device; fewer shorten the finish, whose threads each add `splits` values
// in turn. MobileNet's stem (f16, H200, 132 multiprocessors): 264 splits took 209 us in all, 528
// took 161 (145 of them the partial kernel), 792 took 192 (a longer finish).
constexpr int64_t kMinTiles = 4;

int tile_splits(const Context& ctx, int64_t blocks_x, int64_t tiles) {
  const int64_t target = int64_t{sm_count(ctx.device.index)} * kBlocksPerSm;
  const int64_t by_device = (target + blocks_x - 1) / blocks_x;
  const int64_t by_tiles = (tiles + kMinTiles - 1) / kMinTiles;
  return static_cast<int>(std::clamp<int64_t>(std::min(by_device, by_tiles), 1, 1024));
}

template <typename T, int C>
void backward_weight_c(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* x,
                       const void* dy, DType dw_dtype, void* dw) {
  const Geom g = geom_of(s);
  const int64_t blocks_x = (s.k + kBlockChannels - 1) / kBlockChannels;
  const int64_t tiles = (s.n * s.oh() * s.ow() + kTile - 1) / kTile;
  const int splits = tile_splits(ctx, blocks_x, tiles);
  const int64_t n = s.k * kTaps * C;
  memory::DataPtr ws = ctx.workspace(static_cast<size_t>(splits * n) * sizeof(float));
  auto partial = static_cast<float*>(ws.get());
  dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  auto xt = static_cast<const T*>(x);
  auto dyt = static_cast<const T*>(dy);
  if (pack_width<T>(s.k, {dy}) > 1) {
    few_channel_partial_kernel<T, C, kVec<T>><<<grid, kThreads, 0, stream>>>(g, xt, dyt, partial);
  } else {
    few_channel_partial_kernel<T, C, 1><<<grid, kThreads, 0, stream>>>(g, xt, dyt, partial);
  }
  FRUGAL_LAUNCH_CHECK();
  finish_weight_gradient<T>(ctx, stream, n, splits, partial, dw_dtype, dw);
}

// Note [Few-channel forwards]: one thread an output position and the block's 32 output
// channels (blockIdx.y picks them), its 9C patch values loaded once into registers, the block's
// weights staged in shared memory as f32 [9C][32] and read as float4 broadcasts; 32 sums a thread,
// rounded once, stored as 16-byte packs. cuDNN's forward for MobileNet's stem (x [128, 224, 224,
// 3] f16, K = 32, stride 2) was convolve_common_engine_float_NHWC, 0.245 ms a step for 141 MB of
// traffic (0.47 TB/s, H200), the only cuDNN kernel left in MobileNetV2's step.
template <typename T, int C>
__global__ void __launch_bounds__(kThreads)
    few_channel_forward_kernel(Geom g, const T* __restrict__ x, const T* __restrict__ w,
                               const T* __restrict__ bias, T* __restrict__ y) {
  constexpr int kM = kTaps * C;
  __shared__ __align__(16) float w_tile[kM * kBlockChannels];  // [m][j], m = tap * C + c
  __shared__ __align__(16) float b_tile[kBlockChannels];
  const int k0 = static_cast<int>(blockIdx.y) * kBlockChannels;
  const int channels = min(kBlockChannels, g.k - k0);
  for (int i = static_cast<int>(threadIdx.x); i < kM * kBlockChannels; i += kThreads) {
    const int m = i / kBlockChannels, j = i % kBlockChannels;
    w_tile[i] = j < channels ? to_f(w[(k0 + j) * kM + m]) : 0.0f;  // OHWI: w[k * kM + m]
  }
  if (threadIdx.x < kBlockChannels) {
    const int j = static_cast<int>(threadIdx.x);
    b_tile[j] = bias != nullptr && j < channels ? to_f(bias[k0 + j]) : 0.0f;
  }
  __syncthreads();
  // 16-byte stores where every pack of the block's channels lies within K and y's rows are
  // 16-byte aligned (y itself is: the allocator's).
  constexpr int V = kVec<T>;
  const bool packed = g.k % V == 0;
  const int positions = g.n * g.oh * g.ow;  // few_channel_handles: n * oh * ow * k fits
  // One position a thread, no grid-stride loop: in a loop the compiler kept the loop-invariant
  // weights in registers, 864 of them for MobileNet's stem (255 registers, 2.8 KB spilled).
  const int pos = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (pos < positions) {
    const int ow = pos % g.ow, rest = pos / g.ow;
    const int oh = rest % g.oh, n = rest / g.oh;
    const int64_t ih0 = int64_t{oh} * g.sh - g.ph, iw0 = int64_t{ow} * g.sw - g.pw;
    float patch[kM];
#pragma unroll
    for (int tap = 0; tap < kTaps; ++tap) {
      const int64_t ih = ih0 + int64_t{tap / kSize} * g.dh;
      const int64_t iw = iw0 + int64_t{tap % kSize} * g.dw;
      if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) {
        const T* src = x + ((int64_t{n} * g.h + ih) * g.w + iw) * C;
#pragma unroll
        for (int c = 0; c < C; ++c) patch[tap * C + c] = to_f(src[c]);
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) patch[tap * C + c] = 0.0f;
      }
    }
    float acc[kBlockChannels];
#pragma unroll
    for (int q = 0; q < kBlockChannels / 4; ++q) {
      const float4 bv = reinterpret_cast<const float4*>(b_tile)[q];
      acc[4 * q] = bv.x, acc[4 * q + 1] = bv.y, acc[4 * q + 2] = bv.z, acc[4 * q + 3] = bv.w;
    }
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const float4* row = reinterpret_cast<const float4*>(w_tile + m * kBlockChannels);
#pragma unroll
      for (int q = 0; q < kBlockChannels / 4; ++q) {
        const float4 wv = row[q];
        acc[4 * q] = fmaf(patch[m], wv.x, acc[4 * q]);
        acc[4 * q + 1] = fmaf(patch[m], wv.y, acc[4 * q + 1]);
        acc[4 * q + 2] = fmaf(patch[m], wv.z, acc[4 * q + 2]);
        acc[4 * q + 3] = fmaf(patch[m], wv.w, acc[4 * q + 3]);
      }
    }
    T* out = y + int64_t{pos} * g.k + k0;
    if (packed) {
#pragma unroll
      for (int j = 0; j < kBlockChannels; j += V) {
        if (j < channels) store_pack<T, V>(out + j, acc + j);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kBlockChannels; ++j) {
        if (j < channels) out[j] = from_f<T>(acc[j]);
      }
    }
  }
}

template <typename T, int C>
void forward_c(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* x,
               const void* w, const void* bias, void* y) {
  const dim3 grid(static_cast<unsigned>((s.n * s.oh() * s.ow() + kThreads - 1) / kThreads),
                  static_cast<unsigned>((s.k + kBlockChannels - 1) / kBlockChannels));
  few_channel_forward_kernel<T, C><<<grid, kThreads, 0, stream>>>(
      geom_of(s), static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
      static_cast<T*>(y));
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace

void few_channel_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                         const void* w, const void* bias, void* y) {
  const char* op = "conv2d_forward (few input channels)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    switch (s.c) {
      case 1:
        forward_c<T, 1>(ctx, stream, s, x, w, bias, y);
        break;
      case 2:
        forward_c<T, 2>(ctx, stream, s, x, w, bias, y);
        break;
      case 3:
        forward_c<T, 3>(ctx, stream, s, x, w, bias, y);
        break;
      default:
        forward_c<T, 4>(ctx, stream, s, x, w, bias, y);
        break;
    }
  });
}

void few_channel_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                                 const Conv2dShape& s, const void* x, const void* dy, void* dw) {
  const char* op = "conv2d_backward_weight (few input channels)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    switch (s.c) {
      case 1:
        backward_weight_c<T, 1>(ctx, stream, s, x, dy, dw_dtype, dw);
        break;
      case 2:
        backward_weight_c<T, 2>(ctx, stream, s, x, dy, dw_dtype, dw);
        break;
      case 3:
        backward_weight_c<T, 3>(ctx, stream, s, x, dy, dw_dtype, dw);
        break;
      default:
        backward_weight_c<T, 4>(ctx, stream, s, x, dy, dw_dtype, dw);
        break;
    }
  });
}

}  // namespace frugal::kernels::cuda
