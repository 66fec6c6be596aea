// f32 weight gradients of few-channel convolutions larger than 3x3 as an implicit GEMM on TF32
// tensor cores (Note [Stem weight gradients as GEMMs] in stem_gemm.h).
#include <mma.h>

#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/direct_conv_common.cuh"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/stem_gemm.h"

namespace frugal::kernels::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = kStemTile;  // output positions of one row a block stages at a time
constexpr int kBlockK = 64;       // output channels a block: four 16-row blocks of dw
constexpr int kWarps = kThreads / 32;
constexpr int kRowBlocks = kBlockK / 16;
constexpr int kColumnGroups = kWarps / kRowBlocks;  // warps sharing a row block split its columns
constexpr int kDyStride = kBlockK + 4;              // floats a staged dy row; a multiple of 4
constexpr int kDyLoads = kTile * kBlockK / kThreads;
constexpr int kPixelLoads = kStemMaxWindow / kThreads;
static_assert(kTile % 8 == 0 && kWarps % kRowBlocks == 0);
static_assert(kTile * kBlockK % kThreads == 0 && kStemMaxWindow % kThreads == 0);
// Blocks a multiprocessor: the register bound of two 256-thread blocks holds a warp's eight
// fragments and the next tile's loads.
constexpr int kBlocksPerSm = 2;

struct StemShared {
  float dy[kTile * kDyStride];         // dy[p][j] = dy[position p of the tile, k0 + j], TF32
  float window[kStemMaxWindow * 4];    // [kernel row][pixel][4 channels], TF32, zero outside x
  int block_at[kStemMaxColumnBlocks];  // where column block b's fragment rows start in window
};
static_assert(sizeof(StemShared) <= 48 * 1024, "static shared memory is capped at 48 KiB");
static_assert(kStemMaxWindow * 4 >= kWarps * 256, "the epilogue's scratch fits the window");

// One tile's global loads, held in registers while the block multiplies the previous tile.
struct TileLoads {
  float dy[kDyLoads];
  float4 pixel[kPixelLoads];
};

// Tile `tile` = (output row n * OH + oy, positions ox0 .. ox0 + 31 of it): dy [32][64 channels
// from k0] and the input window [kh][width][4] whose pixel u of kernel row r is
// x[n, oy * sh - ph + r, ox0 * sw - pw + u], zero outside x and past C.
__device__ __forceinline__ TileLoads load_tile(const Geom& g, int kh, int width, int tile,
                                               int tiles_per_row, int k0,
                                               const float* __restrict__ x,
                                               const float* __restrict__ dy) {
  const int t = static_cast<int>(threadIdx.x);
  const int row = tile / tiles_per_row, ox0 = (tile - row * tiles_per_row) * kTile;
  const int n = row / g.oh, oy = row - n * g.oh;
  const int count = min(kTile, g.ow - ox0);
  const int64_t pos0 = static_cast<int64_t>(row) * g.ow + ox0;
  TileLoads l;
#pragma unroll
  for (int i = 0; i < kDyLoads; ++i) {
    const int e = i * kThreads + t, p = e / kBlockK, k = k0 + e % kBlockK;
    l.dy[i] = p < count && k < g.k ? dy[(pos0 + p) * g.k + k] : 0.0f;
  }
  const int iy0 = oy * g.sh - g.ph, ix0 = ox0 * g.sw - g.pw;
#pragma unroll
  for (int i = 0; i < kPixelLoads; ++i) {
    const int e = i * kThreads + t, r = e / width, u = e - r * width;
    const int iy = iy0 + r, ix = ix0 + u;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < kh && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
      const float* src = x + ((static_cast<int64_t>(n) * g.h + iy) * g.w + ix) * g.c;
      v.x = src[0];
      if (g.c > 1) v.y = src[1];
      if (g.c > 2) v.z = src[2];
      if (g.c > 3) v.w = src[3];
    }
    l.pixel[i] = v;
  }
  return l;
}

__device__ __forceinline__ void store_tile(const TileLoads& l, int kh, int width, StemShared& sh) {
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int i = 0; i < kDyLoads; ++i) {
    const int e = i * kThreads + t;
    sh.dy[e / kBlockK * kDyStride + e % kBlockK] = wmma::__float_to_tf32(l.dy[i]);
  }
#pragma unroll
  for (int i = 0; i < kPixelLoads; ++i) {
    const int e = i * kThreads + t;
    if (e < kh * width) {
      const float4 v = l.pixel[i];
      reinterpret_cast<float4*>(sh.window)[e] =
          make_float4(wmma::__float_to_tf32(v.x), wmma::__float_to_tf32(v.y),
                      wmma::__float_to_tf32(v.z), wmma::__float_to_tf32(v.w));
    }
  }
}

// Block (blockIdx.x, split = blockIdx.y): output channels k0 = 64 * blockIdx.x onward, tiles
// split, split + splits, ... Column block b = r * row_blocks + h of dw holds kernel row r, taps
// 4h .. 4h + 3 and 4 channels each; its B fragment for positions 8s .. 8s + 7 is read straight
// from the window: row p at pixel p * sw (ldm 4 * sw floats), 16 columns from pixel 4h (the rows
// overlap; a column past the kernel or past C multiplies into a sum that is dropped). Warp w
// holds dw rows k0 + 16 * (w % 4) + [0, 16) of column blocks w / 4, w / 4 + 2, ... (kFrags of
// them, those below kh * row_blocks). Writes partial[split, k, m] (finish_weight_gradient's
// [split][K * M]) for k < K and the real columns m = (r * kw + j) * C + c.
template <int kFrags>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    stem_partial_kernel(Geom g, int kh, int kw, const float* __restrict__ x,
                        const float* __restrict__ dy, float* __restrict__ partial) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ __align__(32) StemShared sh;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row_block = warp % kRowBlocks, first_block = warp / kRowBlocks;
  const int k0 = static_cast<int>(blockIdx.x) * kBlockK;
  const int row_blocks = (kw + 3) / 4, column_blocks = kh * row_blocks;
  const int width = (g.sw * (kTile - 1) + 4 * row_blocks + 1) / 2 * 2;  // stem_window_width
  const int tiles_per_row = (g.ow + kTile - 1) / kTile;
  const int tiles = g.n * g.oh * tiles_per_row;
  const int splits = static_cast<int>(gridDim.y);

  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[kFrags];
#pragma unroll
  for (int f = 0; f < kFrags; ++f) wmma::fill_fragment(acc[f], 0.0f);

  // Where column block b's rows start in the window for positions 0..7 (step s adds
  // s * 32 * sw), read from shared memory: the first form divided by row_blocks for every
  // fragment of every step and was issue-bound (ncu: 2.1 instructions a cycle).
  const int t = static_cast<int>(threadIdx.x);
  if (t < column_blocks) {
    const int r = t / row_blocks;
    sh.block_at[t] = (r * width + 4 * (t - r * row_blocks)) * 4;
  }

  int tile = static_cast<int>(blockIdx.y);
  TileLoads next;
  if (tile < tiles) next = load_tile(g, kh, width, tile, tiles_per_row, k0, x, dy);
  // The trip count depends on blockIdx only, so every thread reaches every barrier.
  for (; tile < tiles; tile += splits) {
    __syncthreads();  // the previous tile's fragments are loaded
    store_tile(next, kh, width, sh);
    __syncthreads();
    // the next tile's loads stay in flight while this one is multiplied
    if (tile + splits < tiles)
      next = load_tile(g, kh, width, tile + splits, tiles_per_row, k0, x, dy);
#pragma unroll 1  // unrolled, the steps' fragment loads were hoisted past the register bound
    for (int step = 0; step < kTile / 8; ++step) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major> a;
      // a[k][p] = dy[p][k]: column-major with the staged row as its column
      wmma::load_matrix_sync(a, sh.dy + step * 8 * kDyStride + row_block * 16, kDyStride);
      const float* window = sh.window + step * 32 * g.sw;
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        if (first_block + f * kColumnGroups < column_blocks) {
          wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> frag;
          wmma::load_matrix_sync(frag, window + sh.block_at[first_block + f * kColumnGroups],
                                 4 * g.sw);
          wmma::mma_sync(acc[f], a, frag, acc[f]);
        }
      }
    }
  }

  __syncthreads();  // the last tile's fragments are loaded: reuse shared memory
  float* scratch = sh.window + warp * 256;  // this warp's 16 x 16
  const int columns = kh * kw * g.c;
#pragma unroll
  for (int f = 0; f < kFrags; ++f) {
    const int b = first_block + f * kColumnGroups;
    if (b < column_blocks) {
      const int r = b / row_blocks, h = b - r * row_blocks;
      wmma::store_matrix_sync(scratch, acc[f], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int k = k0 + row_block * 16 + e / 16, j = 4 * h + e % 16 / 4, c = e % 4;
        if (k < g.k && j < kw && c < g.c) {
          partial[(static_cast<int64_t>(blockIdx.y) * g.k + k) * columns + (r * kw + j) * g.c + c] =
              scratch[e];
        }
      }
      __syncwarp();
    }
  }
#else
  __trap();  // conv.cu sends nothing here below compute capability 8.0
#endif
}

// Row splits: kBlocksPerSm blocks a multiprocessor, each over at least kMinTiles tiles, as many
// as the workspace bound holds.
constexpr int64_t kMinTiles = 8;

template <int kFrags>
void launch_partial(dim3 grid, cudaStream_t stream, const Geom& g, const Conv2dShape& s,
                    const float* x, const float* dy, float* partial) {
  stem_partial_kernel<kFrags><<<grid, kThreads, 0, stream>>>(
      g, static_cast<int>(s.kh), static_cast<int>(s.kw), x, dy, partial);
}

}  // namespace

void stem_gemm_backward_weight(const Context& ctx, const Conv2dShape& s, const float* x,
                               const float* dy, float* dw) {
  const char* op = "conv2d_backward_weight (stem GEMM)";
  cudaStream_t stream = stream_of(ctx, op);
  const int64_t n = s.k * s.kh * s.kw * s.c;
  const int64_t blocks_x = (s.k + kBlockK - 1) / kBlockK;
  const int64_t tiles = s.n * s.oh() * ((s.ow() + kTile - 1) / kTile);
  // the bytes every call of this shape asks for, as the planner and the meta device expect
  const size_t bound = cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f32, s);
  const int64_t fit = static_cast<int64_t>(bound / (static_cast<size_t>(n) * sizeof(float)));
  FRUGAL_CHECK(fit >= 1, op, ": the workspace bound of ", bound, " bytes holds no ", n,
               " partial sums for ", s.str());
  const int64_t target = int64_t{sm_count(ctx.device.index)} * kBlocksPerSm;
  const int splits = static_cast<int>(std::clamp<int64_t>(
      std::min({(target + blocks_x - 1) / blocks_x, (tiles + kMinTiles - 1) / kMinTiles, fit}), 1,
      1024));
  memory::DataPtr ws = ctx.workspace(bound, memory::Category::conv_workspace);
  auto partial = static_cast<float*>(ws.get());
  const Geom g = geom_of(s);
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  // The fragments a warp holds: the column blocks shared by kColumnGroups warps.
  const int64_t frags = (s.kh * stem_row_blocks(s.kw) + kColumnGroups - 1) / kColumnGroups;
  if (frags <= 2) {
    launch_partial<2>(grid, stream, g, s, x, dy, partial);
  } else if (frags <= 4) {
    launch_partial<4>(grid, stream, g, s, x, dy, partial);
  } else if (frags <= 5) {  // 5x5
    launch_partial<5>(grid, stream, g, s, x, dy, partial);
  } else if (frags <= 7) {  // 7x7
    launch_partial<7>(grid, stream, g, s, x, dy, partial);
  } else {
    launch_partial<8>(grid, stream, g, s, x, dy, partial);
  }
  FRUGAL_LAUNCH_CHECK();
  finish_weight_gradient<float>(ctx, stream, n, splits, partial, DType::f32, dw);
}

}  // namespace frugal::kernels::cuda
