// Depthwise forward and weight gradient a tile a block (Note [Depthwise tiles] in
// depthwise_tiles.h).
#include "kernels/cuda/depthwise_tiles.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/conv_workspace.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/depthwise_common.cuh"
#include "kernels/cuda/direct_conv_common.cuh"
#include "kernels/cuda/handles.h"

namespace frugal::kernels::cuda {
namespace {

using namespace depthwise;  // NOLINT(google-build-using-namespace): the depthwise kernels' kit

// Shared memory a tile aims at: 24 KB lets 9 blocks share a multiprocessor's 228 KB.
constexpr size_t kTileBytes = 24 * 1024;
// Shared memory a tile may take without opting in to more.
constexpr size_t kTileBytesMax = 48 * 1024;
// Channel packs of a tile: 32 channels, 64 or 128 contiguous bytes of a pixel.
constexpr int kTilePacks = 8;
// Strips of a tile (rows x strips along W) before the shared memory is counted: with 8 packs,
// 128 threads for the forward.
constexpr int kTileStrips = 16;
// Staged pixels a thread loads before it normalizes and stores them: loads in flight together.
constexpr int kStageBatch = 4;

// A tile of outputs: `packs` channel packs x `rows` output rows x `strips` strips of kStrip
// outputs along W.
struct Tile {
  int packs, rows, strips;
};

// The input rows and columns a tile reads, its halo included.
__host__ __device__ inline int halo_rows(const Tile& t, int k, int s) { return (t.rows - 1) * s + k; }
__host__ __device__ inline int halo_cols(const Tile& t, int k, int s) {
  return (t.strips * kStrip - 1) * s + k;
}

size_t tile_bytes(const Tile& t, int k, int s, size_t elem_bytes, bool with_dy) {
  const int64_t pixels = int64_t{halo_rows(t, k, s)} * halo_cols(t, k, s) +
                         (with_dy ? int64_t{t.rows} * t.strips * kStrip : 0);
  return static_cast<size_t>(pixels * t.packs * kPack) * elem_bytes;
}

// Two strips a row where the map is wider than one, 16 strips' worth of rows, then fewer rows
// until the staged pixels fit kTileBytes; rows spread evenly over the map's height (7 rows for
// 14 and 28, not 8 and a part tile); 16 packs where a tile has few positions (7x7 maps).
Tile choose_tile(const Conv2dShape& s, size_t elem_bytes, bool with_dy) {
  const int k = static_cast<int>(s.kh), stride = static_cast<int>(s.stride_h);
  const int cvs = static_cast<int>(s.c / kPack), oh = static_cast<int>(s.oh());
  Tile t;
  t.strips = s.ow() > kStrip ? 2 : 1;
  t.rows = std::min(oh, kTileStrips / t.strips);
  t.packs = std::min(cvs, kTilePacks);
  if (t.packs * t.rows * t.strips < 64) t.packs = std::min(cvs, 2 * kTilePacks);
  while (t.rows > 1 && tile_bytes(t, k, stride, elem_bytes, with_dy) > kTileBytes) {
    t.rows = (t.rows + 1) / 2;
  }
  const int tiles_h = (oh + t.rows - 1) / t.rows;
  t.rows = (oh + tiles_h - 1) / tiles_h;
  FRUGAL_CHECK(tile_bytes(t, k, stride, elem_bytes, with_dy) <= kTileBytesMax,
               "depthwise tiles: a tile of ", s.str(), " takes more shared memory than a block has");
  return t;
}

int tiles_h(const Geom& g, const Tile& t) { return (g.oh + t.rows - 1) / t.rows; }
int tiles_w(const Geom& g, const Tile& t) {
  return (g.ow + t.strips * kStrip - 1) / (t.strips * kStrip);
}

// Where tile `index` (of N x tiles_h x tiles_w, W fastest) starts.
struct TilePlace {
  int n, oh0, ow0;
};
__device__ __forceinline__ TilePlace place(const Geom& g, const Tile& t, int index) {
  const int across = (g.ow + t.strips * kStrip - 1) / (t.strips * kStrip);
  const int down = (g.oh + t.rows - 1) / t.rows;
  return {index / across / down, index / across % down * t.rows,
          index % across * t.strips * kStrip};
}

// Stages rows x cols pixels of src [N, h, w, C] from (r0, c0) of image n, `packs` channel packs
// from pack0, into dst[((row * cols + col) * packs + p) * V], each pack made over by `in`; pixels
// outside the map and packs from `count` on stage as zeros (the convolution's padding is zero
// whatever the input's recipe). blockDim.x is a multiple of `packs`, so a thread's pack is
// threadIdx.x % packs throughout and `in` holds that pack's numbers. Each load reads inside the
// map (clamped), so a batch of them issues together without branches.
template <typename T, class In>
__device__ __forceinline__ void stage(const T* __restrict__ src, int h, int w, int c, int n,
                                      int r0, int c0, int rows, int cols, int packs, int pack0,
                                      int count, const In& in, T* __restrict__ dst) {
  constexpr int V = kPack;
  const int p = static_cast<int>(threadIdx.x) % packs;
  const int step = static_cast<int>(blockDim.x) / packs;  // pixels a pass of the block
  const int pixels = rows * cols;
  const int channel = (pack0 + min(p, count - 1)) * V;
  const T* image = src + static_cast<int64_t>(n) * h * w * c + channel;
  for (int pix0 = static_cast<int>(threadIdx.x) / packs; pix0 < pixels;
       pix0 += kStageBatch * step) {
    float v[kStageBatch][V];
    bool inside[kStageBatch];
#pragma unroll
    for (int k = 0; k < kStageBatch; ++k) {
      const int pix = pix0 + k * step;
      const int ih = r0 + pix / cols, iw = c0 + pix % cols;
      inside[k] = pix < pixels && p < count && static_cast<unsigned>(ih) < static_cast<unsigned>(h) &&
                  static_cast<unsigned>(iw) < static_cast<unsigned>(w);
      const int ihc = min(max(ih, 0), h - 1), iwc = min(max(iw, 0), w - 1);
      load_floats<T, V>(image + (ihc * w + iwc) * c, v[k]);
    }
#pragma unroll
    for (int k = 0; k < kStageBatch; ++k) {
      const int pix = pix0 + k * step;
      if (pix >= pixels) break;
      in(v[k]);
#pragma unroll
      for (int e = 0; e < V; ++e) v[k][e] = inside[k] ? v[k][e] : 0.0f;
      store_pack<T, V>(dst + (pix * packs + p) * V, v[k]);
    }
  }
}

// y[n, oh, ow, c] = bias[c] + sum_{a, b} x[n, oh*S - ph + a, ow*S - pw + b, c] * w[c, a, b] for
// one tile a block (blockIdx.x: the channel block fastest, then the tile), one strip of kStrip
// outputs and one pack a thread: the strip kernel's sums, read from the staged tile.
template <typename T, int K, int S, class In>
__global__ void __launch_bounds__(kThreads)
    forward_tile_kernel(Geom g, Tile tile, BnActInput bn, const T* __restrict__ x,
                        const float* __restrict__ wt, const T* __restrict__ bias,
                        T* __restrict__ y) {
  constexpr int V = kPack;
  using Cols = ReadCols<K, S>;
  extern __shared__ __align__(16) unsigned char tile_shared[];
  T* staged = reinterpret_cast<T*>(tile_shared);
  const int cvs = g.c / V, channel_blocks = (cvs + tile.packs - 1) / tile.packs;
  const int pack0 = static_cast<int>(blockIdx.x) % channel_blocks * tile.packs;
  const int count = min(tile.packs, cvs - pack0);
  const TilePlace at = place(g, tile, static_cast<int>(blockIdx.x) / channel_blocks);
  const int p = static_cast<int>(threadIdx.x) % tile.packs;
  const int c0 = (pack0 + min(p, count - 1)) * V;
  const int cols = halo_cols(tile, K, S);
  stage<T>(x, g.h, g.w, g.c, at.n, at.oh0 * S - g.ph, at.ow0 * S - g.pw, halo_rows(tile, K, S),
           cols, tile.packs, pack0, count, In(bn, c0), staged);
  __syncthreads();
  const int q = static_cast<int>(threadIdx.x) / tile.packs;
  const int strip = q % tile.strips, row = q / tile.strips;
  const int oh = at.oh0 + row, ow0 = at.ow0 + strip * kStrip;
  if (p >= count || oh >= g.oh || ow0 >= g.ow) return;
  float init[V] = {};
  if (bias != nullptr) load_floats<T, V>(bias + c0, init);
  float acc[kStrip][V];
#pragma unroll
  for (int r = 0; r < kStrip; ++r) {
#pragma unroll
    for (int v = 0; v < V; ++v) acc[r][v] = init[v];
  }
  const int pitch = tile.packs * V;  // elements from one staged pixel to the next
#pragma unroll
  for (int a = 0; a < K; ++a) {
    // a row of padding adds nothing (the strips skip it too)
    if (static_cast<unsigned>(oh * S - g.ph + a) >= static_cast<unsigned>(g.h)) continue;
    float wr[K][V];
#pragma unroll
    for (int b = 0; b < K; ++b) load_floats<float, V>(wt + (a * K + b) * g.c + c0, wr[b]);
    const T* src = staged + ((row * S + a) * cols + strip * kStrip * S) * pitch + p * V;
#pragma unroll
    for (int j = 0; j < Cols::kCols; ++j) {
      float xv[V];
      load_floats<T, V>(src + j * pitch, xv);
#pragma unroll
      for (int b = 0; b < K; ++b) {
        const int r = Cols::target(j, b);
        if (r < 0) continue;
#pragma unroll
        for (int v = 0; v < V; ++v) acc[r][v] = fmaf(xv[v], wr[b][v], acc[r][v]);
      }
    }
  }
  const int outputs = min(kStrip, g.ow - ow0);
  T* out = y + ((at.n * g.oh + oh) * g.ow + ow0) * g.c + c0;
#pragma unroll
  for (int r = 0; r < kStrip; ++r) {
    if (r < outputs) store_pack<T, V>(out + r * g.c, acc[r]);
  }
}

// partial[split, c, a*K + b] = sum over the outputs (n, oh, ow) of the split's tiles of
// dy[n, oh, ow, c] * x[n, oh*S - ph + a, ow*S - pw + b, c]. A block: one channel block
// (blockIdx.x) and the tiles blockIdx.y, blockIdx.y + gridDim.y, ... (the split); its threads are
// `packs` x K columns (a pack and a kernel row, K x V sums each) x workers, worker w taking the
// tile's strips w, w + workers, ... The tile's x (made over by In) and dy are staged side by side.
template <typename T, int K, int S, class In>
__global__ void __launch_bounds__(kThreads, K == 3 ? 4 : 2)
    weight_tile_kernel(Geom g, Tile tile, BnActInput bn, const T* __restrict__ x,
                       const T* __restrict__ dy, float* __restrict__ partial) {
  constexpr int V = kPack;
  using Cols = ReadCols<K, S>;
  extern __shared__ __align__(16) unsigned char tile_shared[];
  const int rows = halo_rows(tile, K, S), cols = halo_cols(tile, K, S);
  const int out_cols = tile.strips * kStrip, pitch = tile.packs * V;
  T* staged_x = reinterpret_cast<T*>(tile_shared);
  T* staged_dy = staged_x + rows * cols * pitch;
  const int columns = tile.packs * K, workers = static_cast<int>(blockDim.x) / columns;
  const int column = static_cast<int>(threadIdx.x) % columns;
  const int worker = static_cast<int>(threadIdx.x) / columns;
  const int p = column % tile.packs, a = column / tile.packs;
  const int cvs = g.c / V, pack0 = static_cast<int>(blockIdx.x) * tile.packs;
  const int count = min(tile.packs, cvs - pack0);
  const In in(bn, (pack0 + min(p, count - 1)) * V);  // the thread's pack, as stage() takes it
  const int tiles = g.n * ((g.oh + tile.rows - 1) / tile.rows) *
                    ((g.ow + out_cols - 1) / out_cols);
  const int items = tile.rows * tile.strips;
  float acc[K * V];  // [b][v] of kernel row a
#pragma unroll
  for (int m = 0; m < K * V; ++m) acc[m] = 0.0f;
  for (int t = static_cast<int>(blockIdx.y); t < tiles; t += static_cast<int>(gridDim.y)) {
    const TilePlace at = place(g, tile, t);
    stage<T>(x, g.h, g.w, g.c, at.n, at.oh0 * S - g.ph, at.ow0 * S - g.pw, rows, cols, tile.packs,
             pack0, count, in, staged_x);
    stage<T>(dy, g.oh, g.ow, g.c, at.n, at.oh0, at.ow0, tile.rows, out_cols, tile.packs, pack0,
             count, PlainInput(), staged_dy);
    __syncthreads();
    for (int item = worker; p < count && item < items; item += workers) {
      const int row = item / tile.strips, strip = item % tile.strips;
      const int oh = at.oh0 + row;
      if (oh >= g.oh || at.ow0 + strip * kStrip >= g.ow) continue;
      if (static_cast<unsigned>(oh * S - g.ph + a) >= static_cast<unsigned>(g.h)) continue;
      // dy past the row's end staged as zeros: every product is made without a branch
      const T* d = staged_dy + (row * out_cols + strip * kStrip) * pitch + p * V;
      float gv[kStrip][V];
#pragma unroll
      for (int r = 0; r < kStrip; ++r) load_floats<T, V>(d + r * pitch, gv[r]);
      const T* src = staged_x + ((row * S + a) * cols + strip * kStrip * S) * pitch + p * V;
#pragma unroll
      for (int j = 0; j < Cols::kCols; ++j) {
        float xv[V];
        load_floats<T, V>(src + j * pitch, xv);
#pragma unroll
        for (int b = 0; b < K; ++b) {
          const int r = Cols::target(j, b);
          if (r < 0) continue;
#pragma unroll
          for (int v = 0; v < V; ++v) acc[b * V + v] = fmaf(gv[r][v], xv[v], acc[b * V + v]);
        }
      }
    }
    __syncthreads();  // the next tile overwrites the staged pixels
  }
  // Sum over the workers (Note [Block row sums]); block column l = a * packs + p, m = b * V + v.
  sum_block_rows(acc, columns, workers, [&](int l, int m, float sum) {
    const int pack = l % tile.packs;
    if (pack < count) {
      const int tap = l / tile.packs * K + m / V;
      partial[(static_cast<int64_t>(blockIdx.y) * g.c + (pack0 + pack) * V + m % V) * (K * K) +
              tap] = sum;
    }
  });
}

// Runs launch(K, S) with K (3 or 5) and S (1 or 2) as integral constants.
template <typename Launch>
void with_kernel_and_stride(const Conv2dShape& s, Launch launch) {
  auto by_stride = [&](auto k) {
    if (s.stride_w == 1) {
      launch(k, std::integral_constant<int, 1>{});
    } else {
      launch(k, std::integral_constant<int, 2>{});
    }
  };
  if (s.kh == 3) {
    by_stride(std::integral_constant<int, 3>{});
  } else {
    by_stride(std::integral_constant<int, 5>{});
  }
}

template <typename T, int K, int S, class In>
void forward_tiles(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                   const BnActInput& bn, const T* x, const float* wt, const T* bias, T* y) {
  const Geom g = geom_of(s);
  const Tile tile = choose_tile(s, sizeof(T), false);
  const int64_t channel_blocks = (s.c / kPack + tile.packs - 1) / tile.packs;
  const int64_t blocks = channel_blocks * s.n * tiles_h(g, tile) * tiles_w(g, tile);
  const int threads = tile.packs * tile.rows * tile.strips;
  forward_tile_kernel<T, K, S, In>
      <<<static_cast<unsigned>(blocks), threads, tile_bytes(tile, K, S, sizeof(T), false),
         stream>>>(g, tile, bn, x, wt, bias, y);
  FRUGAL_LAUNCH_CHECK();
}

// Row splits: the blocks the device holds at once (Note [Grids by occupancy] in
// cuda_common.cuh), at least 2 tiles a block, and the partial sums (written, then read by the
// finish) at most an eighth of the traffic of x and dy.
template <typename T, int K, int S, class In>
void backward_weight_tiles(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                           const BnActInput& bn, const T* x, const T* dy, DType dw_dtype,
                           void* dw) {
  const Geom g = geom_of(s);
  const Tile tile = choose_tile(s, sizeof(T), true);
  const int64_t blocks_x = (s.c / kPack + tile.packs - 1) / tile.packs;
  const int threads = kThreads / (tile.packs * K) * (tile.packs * K);
  const size_t shared = tile_bytes(tile, K, S, sizeof(T), true);
  const auto kernel = weight_tile_kernel<T, K, S, In>;
  const int64_t tiles = s.n * tiles_h(g, tile) * tiles_w(g, tile);
  const int64_t activations =
      (s.n * s.h * s.w + s.n * s.oh() * s.ow()) * s.c * static_cast<int64_t>(sizeof(T));
  const int64_t per_split = s.c * K * K * static_cast<int64_t>(sizeof(float));
  const int64_t splits = std::max<int64_t>(
      1, std::min<int64_t>({resident_fill(ctx, kernel, threads, shared) / blocks_x,
                            (tiles + 1) / 2, activations / 8 / per_split, 1024}));
  const int64_t n = s.c * K * K;
  memory::DataPtr ws = ctx.workspace(static_cast<size_t>(splits * n) * sizeof(float));
  auto partial = static_cast<float*>(ws.get());
  dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  kernel<<<grid, threads, shared, stream>>>(g, tile, bn, x, dy, partial);
  FRUGAL_LAUNCH_CHECK();
  finish_weight_gradient<T>(ctx, stream, n, static_cast<int>(splits), partial, dw_dtype, dw);
}

}  // namespace

bool tiles_take(const Conv2dShape& s) {
  return depthwise_handles(s) && s.stride_h == s.stride_w &&
         (s.stride_w == 1 || s.stride_w == 2) && s.dil_h == 1 && s.dil_w == 1 &&
         s.c % kPack == 0;
}

void tiled_forward(const Context& ctx, cudaStream_t stream, DType dtype, const Conv2dShape& s,
                   const BnActInput* bn, const void* x, const float* wt, const void* bias,
                   void* y) {
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "conv2d_forward (depthwise tiles)", {
    with_input<T, kPack>(bn, [&](auto in) {
      using In = typename decltype(in)::type;
      with_kernel_and_stride(s, [&](auto k, auto stride) {
        forward_tiles<T, decltype(k)::value, decltype(stride)::value, In>(
            ctx, stream, s, bn != nullptr ? *bn : BnActInput{}, static_cast<const T*>(x), wt,
            static_cast<const T*>(bias), static_cast<T*>(y));
      });
    });
  });
}

void tiled_backward_weight(const Context& ctx, cudaStream_t stream, DType dtype, DType dw_dtype,
                           const Conv2dShape& s, const BnActInput* bn, const void* x,
                           const void* dy, void* dw) {
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "conv2d_backward_weight (depthwise tiles)", {
    with_input<T, kPack>(bn, [&](auto in) {
      using In = typename decltype(in)::type;
      with_kernel_and_stride(s, [&](auto k, auto stride) {
        backward_weight_tiles<T, decltype(k)::value, decltype(stride)::value, In>(
            ctx, stream, s, bn != nullptr ? *bn : BnActInput{}, static_cast<const T*>(x),
            static_cast<const T*>(dy), dw_dtype, dw);
      });
    });
  });
}

}  // namespace frugal::kernels::cuda
