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

constexpr int kBlockK = 64;  // output channels a block: four 16-row blocks of dw
constexpr int kTile = 32;    // output positions a block stages at a time: four k-steps of 8
constexpr int kWarps = kThreads / 32;
constexpr int kRowBlocks = kBlockK / 16;
constexpr int kColumnGroups = kWarps / kRowBlocks;  // warps sharing a row block split its columns
constexpr int kDyStride = kBlockK + 4;              // floats a staged dy row; a multiple of 4
constexpr int kMaxPatchStride = kStemMaxColumns + 4;
constexpr int kColumnLoads = 16;  // patch loads a thread keeps in flight
static_assert(kStemMaxColumns <= kThreads, "a thread stages one patch column");
static_assert(kStemMaxColumns % 16 == 0);
static_assert(kWarps % kRowBlocks == 0);
// Blocks a multiprocessor: two 256-thread blocks, so one stages its tile while the other
// multiplies (the staging is most of a tile's time).
constexpr int kBlocksPerSm = 2;

struct StemShared {
  float dy[kTile * kDyStride];          // dy[p][j] = dy[p0 + p, k0 + j], TF32
  float patch[kTile * kMaxPatchStride];  // patch[p][m], TF32; columns M..padded stay zero
  int base[kTile];                       // n * H of position p0 + p, -1 past the last position
  int iy0[kTile], ix0[kTile];            // its window's top-left input pixel
};
static_assert(sizeof(StemShared) <= 48 * 1024, "static shared memory is capped at 48 KiB");
static_assert(sizeof(StemShared) >= kWarps * 256 * sizeof(float), "the epilogue's scratch fits");

// Block (blockIdx.x, split = blockIdx.y): output channels k0 = 64 * blockIdx.x onward, tiles
// split, split + splits, ... of the positions. Warp w holds dw rows k0 + 16 * (w % 4) + [0, 16)
// and the 16-column blocks w / 4, w / 4 + 2, ... (kFrags of them, those below columns / 16).
// Writes partial[split, k, m] (finish_weight_gradient's [split][K * M]) for k < K, m < M.
template <int kFrags>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    stem_partial_kernel(Geom g, int kh, int kw, int columns, const float* __restrict__ x,
                        const float* __restrict__ dy, float* __restrict__ partial) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ __align__(32) StemShared sh;
  const int t = static_cast<int>(threadIdx.x);
  const int warp = t / 32, lane = t % 32;
  const int row_block = warp % kRowBlocks, first_column_block = warp / kRowBlocks;
  const int k0 = static_cast<int>(blockIdx.x) * kBlockK;
  const int m_total = kh * kw * g.c;
  const int stride = columns + 4;  // floats a staged patch row
  const int positions = g.n * g.oh * g.ow;
  const int tiles = (positions + kTile - 1) / kTile;

  // This thread's patch column m = (i * kw + j) * C + c, when m < M: its tap's offsets.
  const int m = t;
  const bool has_column = m < m_total;
  const int tap = m / g.c, c = m - tap * g.c;
  const int tap_y = tap / kw * g.dh, tap_x = tap % kw * g.dw;
  if (m >= m_total && m < columns) {  // the padding columns stay zero
    for (int p = 0; p < kTile; ++p) sh.patch[p * stride + m] = 0.0f;
  }

  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[kFrags];
#pragma unroll
  for (int f = 0; f < kFrags; ++f) wmma::fill_fragment(acc[f], 0.0f);

  // The trip count depends on blockIdx only, so every thread reaches every barrier.
  for (int tile = static_cast<int>(blockIdx.y); tile < tiles; tile += static_cast<int>(gridDim.y)) {
    const int p0 = tile * kTile;
    __syncthreads();  // the previous tile's fragments are loaded
    if (t < kTile) {
      const int pos = p0 + t;
      if (pos < positions) {
        const int ox = pos % g.ow, rest = pos / g.ow;
        const int oy = rest % g.oh;
        sh.base[t] = rest / g.oh * g.h;
        sh.iy0[t] = oy * g.sh - g.ph;
        sh.ix0[t] = ox * g.sw - g.pw;
      } else {
        sh.base[t] = -1;
      }
    }
    // dy: kTile x kBlockK values, kTile * kBlockK / kThreads a thread, all loads in flight
    float v[kTile * kBlockK / kThreads];
#pragma unroll
    for (int i = 0; i < kTile * kBlockK / kThreads; ++i) {
      const int e = i * kThreads + t, p = e / kBlockK, j = e % kBlockK;
      const int pos = p0 + p, k = k0 + j;
      v[i] = pos < positions && k < g.k ? dy[static_cast<int64_t>(pos) * g.k + k] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kTile * kBlockK / kThreads; ++i) {
      const int e = i * kThreads + t;
      sh.dy[e / kBlockK * kDyStride + e % kBlockK] = wmma::__float_to_tf32(v[i]);
    }
    __syncthreads();  // the positions' origins are staged
    if (has_column) {
      // kColumnLoads positions' values in flight at a time: all 32 took too many registers
#pragma unroll
      for (int p0 = 0; p0 < kTile; p0 += kColumnLoads) {
        float col[kColumnLoads];
#pragma unroll
        for (int i = 0; i < kColumnLoads; ++i) {
          const int p = p0 + i;
          const int iy = sh.iy0[p] + tap_y, ix = sh.ix0[p] + tap_x, base = sh.base[p];
          const bool inside = base >= 0 && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
          col[i] = inside ? x[(static_cast<int64_t>(base + iy) * g.w + ix) * g.c + c] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < kColumnLoads; ++i) {
          sh.patch[(p0 + i) * stride + m] = wmma::__float_to_tf32(col[i]);
        }
      }
    }
    __syncthreads();  // dy and the patch are staged
#pragma unroll 1  // unrolled, the steps' fragment loads were hoisted past the register bound
    for (int step = 0; step < kTile / 8; ++step) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major> a;
      // a[k][p] = dy[p][k]: column-major with the staged row as its column
      wmma::load_matrix_sync(a, sh.dy + step * 8 * kDyStride + row_block * 16, kDyStride);
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        const int cb = first_column_block + f * kColumnGroups;
        if (cb * 16 < columns) {
          wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
          wmma::load_matrix_sync(b, sh.patch + step * 8 * stride + cb * 16, stride);
          wmma::mma_sync(acc[f], a, b, acc[f]);
        }
      }
    }
  }

  __syncthreads();  // the last tile's fragments are loaded: reuse shared memory
  float* scratch = sh.patch + warp * 256;  // this warp's 16 x 16
#pragma unroll
  for (int f = 0; f < kFrags; ++f) {
    const int cb = first_column_block + f * kColumnGroups;
    if (cb * 16 < columns) {
      wmma::store_matrix_sync(scratch, acc[f], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int k = k0 + row_block * 16 + e / 16, col = cb * 16 + e % 16;
        if (k < g.k && col < m_total) {
          partial[(static_cast<int64_t>(blockIdx.y) * g.k + k) * m_total + col] = scratch[e];
        }
      }
      __syncwarp();
    }
  }
#else
  __trap();  // the host sends nothing here below compute capability 8.0
#endif
}

// Row splits: kBlocksPerSm blocks a multiprocessor, each over at least kMinTiles tiles, as many
// as the workspace bound holds.
constexpr int64_t kMinTiles = 8;

template <int kFrags>
void launch_partial(dim3 grid, cudaStream_t stream, const Geom& g, const Conv2dShape& s,
                    int columns, const float* x, const float* dy, float* partial) {
  stem_partial_kernel<kFrags><<<grid, kThreads, 0, stream>>>(
      g, static_cast<int>(s.kh), static_cast<int>(s.kw), columns, x, dy, partial);
}

}  // namespace

void stem_gemm_backward_weight(const Context& ctx, const Conv2dShape& s, const float* x,
                               const float* dy, float* dw) {
  const char* op = "conv2d_backward_weight (stem GEMM)";
  cudaStream_t stream = stream_of(ctx, op);
  const int64_t m = s.kh * s.kw * s.c;
  const int columns = static_cast<int>((m + 15) / 16 * 16);
  const int64_t n = s.k * m;
  const int64_t blocks_x = (s.k + kBlockK - 1) / kBlockK;
  const int64_t tiles = (s.n * s.oh() * s.ow() + kTile - 1) / kTile;
  // the bytes every call of this shape asks for, as the planner and the meta device expect
  const size_t bound = cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f32, s);
  const int64_t fit = static_cast<int64_t>(bound / (static_cast<size_t>(n) * sizeof(float)));
  const int64_t target = int64_t{sm_count(ctx.device.index)} * kBlocksPerSm;
  const int splits = static_cast<int>(std::clamp<int64_t>(
      std::min({(target + blocks_x - 1) / blocks_x, (tiles + kMinTiles - 1) / kMinTiles, fit}),
      1, 1024));
  FRUGAL_CHECK(fit >= 1, op, ": the workspace bound of ", bound, " bytes holds no ", n,
               " partial sums for ", s.str());
  memory::DataPtr ws = ctx.workspace(bound, memory::Category::conv_workspace);
  auto partial = static_cast<float*>(ws.get());
  const Geom g = geom_of(s);
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  // Column blocks a warp holds: columns / 16 shared by kColumnGroups warps, in steps of 2 frags.
  const int frags = (columns / 16 + kColumnGroups - 1) / kColumnGroups;
  if (frags <= 2) {
    launch_partial<2>(grid, stream, g, s, columns, x, dy, partial);
  } else if (frags <= 4) {
    launch_partial<4>(grid, stream, g, s, columns, x, dy, partial);
  } else if (frags <= 6) {
    launch_partial<6>(grid, stream, g, s, columns, x, dy, partial);
  } else {
    launch_partial<8>(grid, stream, g, s, columns, x, dy, partial);
  }
  FRUGAL_LAUNCH_CHECK();
  finish_weight_gradient<float>(ctx, stream, n, splits, partial, DType::f32, dw);
}

}  // namespace frugal::kernels::cuda
