// Weight gradient of 3x3 convolutions with at most 4 input channels (Note [Few-channel weight
// gradients] in few_channel_conv.h): a small GEMM per block over tiles of output positions staged
// in shared memory, row splits summed into an f32 workspace, then the splits added in order. And
// their forward (Note [Few-channel forwards]): 16 output positions a warp on the tensor cores.
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

// Note [Few-channel forwards]: a warp takes 16 output positions and the block's 32 output
// channels (blockIdx.y picks them) on the tensor cores: y[16, 32] = patch[16, 9C] w^T[9C, 32],
// as mma.sync m16n8k16 (16-bit inputs, f32 sums) over ceil(9C / 16) steps of the patch's
// columns (m = tap * C + c, zero past 9C) and 4 tiles of 8 channels. Each lane loads its part of
// the im2col patch straight into its A fragments: the 16-bit values as they are, two to a
// register, so a position's 27 values (C = 3) cost no conversions and no shared memory; the
// lane's B fragments (the weights) and biases are loaded once and kept while the warp strides over
// tiles. The sums start at the bias and are rounded once, into the warp's tile in shared memory,
// from which the lanes store 16-byte pieces: a warp's 16 positions of 32 channels are 1 KB of y
// in one piece when K = 32. Stored straight from the fragments, as pairs, each store instruction
// wrote 8 rows' 16 bytes, and the kernel took 185 us for MobileNet's stem (session 37). The first
// form, a thread a position
// with 32 f32 FMA chains over the weights broadcast from shared memory (864 FMAs and 216 shared
// loads a position for MobileNet's stem), was issue bound: 0.130 ms a step for 141 MB of traffic
// (x [128, 224, 224, 3] f16, K = 32, stride 2, H200), where cuDNN's
// convolve_common_engine_float_NHWC had taken 0.245 ms.
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4],
                                            const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

template <typename T, int C>
__global__ void __launch_bounds__(kThreads)
    few_channel_forward_kernel(Geom g, const T* __restrict__ x, const T* __restrict__ w,
                               const T* __restrict__ bias, T* __restrict__ y) {
  static_assert(sizeof(T) == 2, "the tensor-core forward takes 16-bit values");
  constexpr int kM = kTaps * C;
  constexpr int kSteps = (kM + 15) / 16;       // steps of 16 patch columns
  constexpr int kTiles = kBlockChannels / 8;   // tiles of 8 output channels
  constexpr int kSlots = kSteps * 4;           // a lane's patch columns a position: 2 pairs a step
  constexpr int kOutRow = kBlockChannels + 8;  // values a row of a warp's output tile
  constexpr int kPieces = kBlockChannels / 8;  // 16-byte pieces a row
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* ws = reinterpret_cast<const uint16_t*>(w);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int group = lane / 4, pair = lane % 4 * 2;  // the fragments' row and first column
  const int k0 = static_cast<int>(blockIdx.y) * kBlockChannels;
  const int channels = min(kBlockChannels, g.k - k0);
  // B: rows (patch columns) s * 16 + pair + {0, 1} (register 0) and + 8 (register 1), column
  // (output channel) t * 8 + group; w is OHWI, w[k * kM + m].
  uint32_t b[kSteps][kTiles][2];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const int j = t * 8 + group;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int m = s * 16 + r * 8 + pair;
        const uint32_t lo = j < channels && m < kM ? ws[(k0 + j) * kM + m] : 0;
        const uint32_t hi = j < channels && m + 1 < kM ? ws[(k0 + j) * kM + m + 1] : 0;
        b[s][t][r] = lo | hi << 16;
      }
    }
  }
  float bias_pair[kTiles][2];  // the lane's output channels t * 8 + pair + {0, 1}
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = t * 8 + pair + e;
      bias_pair[t][e] = bias != nullptr && j < channels ? to_f(bias[k0 + j]) : 0.0f;
    }
  }
  // The lane's patch columns m = s * 16 + r * 8 + pair + e, slot i = (s * 2 + r) * 2 + e: the
  // element offset of each from a position's first tap, and its tap in 4 bits of `taps` (15,
  // a tap no position has, past 9C).
  int offset[kSlots];
  uint64_t taps = 0;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int m = i / 4 * 16 + i / 2 % 2 * 8 + pair + i % 2, tap = m / C;
    offset[i] = (tap / kSize * g.dh * g.w + tap % kSize * g.dw) * C + m % C;
    taps |= uint64_t{m < kM ? static_cast<unsigned>(tap) : 15u} << (4 * i);
  }
  // Each warp's 16 x 32 outputs, rows padded to 40 values (20 banks) so that the fragments'
  // pair stores fall in 32 different banks; 16-byte pieces stay aligned (80 bytes a row).
  __shared__ __align__(16) uint32_t out_tiles[kThreads / 32][16 * kOutRow / 2];
  const bool packed = g.k % 8 == 0;         // 16-byte pieces of y start 16-byte aligned
  const int positions = g.n * g.oh * g.ow;  // few_channel_handles: n * oh * ow * k fits
  const int tiles = (positions + 15) / 16;
  const int warps = static_cast<int>(gridDim.x * blockDim.x / 32);
  for (int tile = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32); tile < tiles;
       tile += warps) {
    // A: register half + 2 * r holds row group + 8 * half, columns s * 16 + r * 8 + pair + {0, 1}
    uint32_t a[kSteps][4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int pos = tile * 16 + group + 8 * half;
      const int ow = pos % g.ow, rest = pos / g.ow;
      const int oh = rest % g.oh, n = rest / g.oh;
      const int ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
      const int first = ((n * g.h + ih0) * g.w + iw0) * C;  // may lie outside x: only offset
      // Bit tap of `valid`: the tap lies inside the image (and the position in the tensor).
      unsigned rows = 0, cols = 0;
#pragma unroll
      for (int d = 0; d < kSize; ++d) {
        const int ih = ih0 + d * g.dh, iw = iw0 + d * g.dw;
        rows |= static_cast<unsigned>(ih >= 0 && ih < g.h) << d;
        cols |= static_cast<unsigned>(iw >= 0 && iw < g.w) << d;
      }
      unsigned valid = 0;
#pragma unroll
      for (int d = 0; d < kSize; ++d) valid |= (rows >> d & 1 ? cols : 0u) << (kSize * d);
      if (pos >= positions) valid = 0;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          uint32_t word = 0;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = (s * 2 + r) * 2 + e;
            const bool load = (valid >> (taps >> (4 * i) & 15) & 1) != 0;
            // Every lane loads, from x's first element where its value is a zero of the
            // padding, and no branch comes between the loads: a load under a branch was waited
            // for before the next one issued (the first form's 7,700 cycles a tile), as the
            // depthwise strips' were (load_column).
            const uint32_t v = __ldg(xs + (load ? first + offset[i] : 0));
            word |= (load ? v : 0u) << (16 * e);
          }
          a[s][half + 2 * r] = word;
        }
      }
    }
    float acc[kTiles][4];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      acc[t][0] = acc[t][2] = bias_pair[t][0];
      acc[t][1] = acc[t][3] = bias_pair[t][1];
#pragma unroll
      for (int s = 0; s < kSteps; ++s) mma_16x8x16<T>(acc[t], a[s], b[s][t]);
    }
    // D: acc[t][2 * half + e] is row group + 8 * half, channel t * 8 + pair + e; rounded into the
    // warp's tile of out_tiles, then stored from there a 16-byte piece a lane at a time.
    T* tile_values = reinterpret_cast<T*>(out_tiles[threadIdx.x / 32]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        store_pack<T, 2>(tile_values + (group + 8 * half) * kOutRow + t * 8 + pair,
                         &acc[t][2 * half]);
      }
    }
    __syncwarp();
#pragma unroll
    for (int piece = lane; piece < 16 * kPieces; piece += 32) {
      const int row = piece / kPieces, j = piece % kPieces * 8;
      const int pos = tile * 16 + row;
      if (pos >= positions || j >= channels) continue;
      const T* from = tile_values + row * kOutRow + j;
      T* to = y + int64_t{pos} * g.k + k0 + j;
      if (packed && j + 8 <= channels) {
        *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
      } else {
        for (int e = 0; e < 8 && j + e < channels; ++e) to[e] = from[e];
      }
    }
    __syncwarp();  // the tile is read out before the next tile's sums go in
  }
}

template <typename T, int C>
void forward_c(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* x,
               const void* w, const void* bias, void* y) {
  const auto kernel = few_channel_forward_kernel<T, C>;
  const int64_t lanes = (s.n * s.oh() * s.ow() + 15) / 16 * 32;  // a warp for 16 positions
  const dim3 grid(resident_grid(ctx, kernel, lanes, kThreads),
                  static_cast<unsigned>((s.k + kBlockChannels - 1) / kBlockChannels));
  kernel<<<grid, kThreads, 0, stream>>>(geom_of(s), static_cast<const T*>(x),
                                        static_cast<const T*>(w), static_cast<const T*>(bias),
                                        static_cast<T*>(y));
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace

void few_channel_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                         const void* w, const void* bias, void* y) {
  const char* op = "conv2d_forward (few input channels)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CHECK(dtype == DType::f16 || dtype == DType::bf16, op, ": ", s.str(),
               " runs on tensor cores in f16 or bf16, not ", dtype);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    if constexpr (sizeof(T) == 2) {
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
