// The kernels of bench/fused_pointwise_probe.cu: a 1x1 convolution's forward and backward, as
// today's separate passes (normalize, channel sums, their finish, cuBLAS between them) and as
// fused WMMA kernels that normalize on load and sum on store. Layouts are NHWC: x is [rows][k],
// z and its gradient g are [rows][n], the weights w are [n][k]; k and n are multiples of 8, as all
// of MobileNetV2's are. f(x) = clamp(x * scale + shift, 0, 6) per input channel (the previous
// batch norm and ReLU6), or x * scale + shift where the batch norm has no activation after it.
#pragma once

#include <cuda_fp16.h>
#include <mma.h>

namespace pointwise_probe {

namespace wmma = nvcuda::wmma;

constexpr int kRowsPerBlock = 128;  // rows of one tile
constexpr int kDepth = 32;          // channels of the summed dimension a tile holds at once
constexpr int kThreads = 256;       // 8 warps: warp w computes rows 16w..16w+15 of a tile
constexpr int kPad = 8;             // halves after each shared row, against bank conflicts

__device__ __forceinline__ float affine(float x, float scale, float shift) {
  return fmaf(x, scale, shift);
}

__device__ __forceinline__ float apply(float x, float scale, float shift, bool relu6) {
  const float v = affine(x, scale, shift);
  return relu6 ? fminf(fmaxf(v, 0.0f), 6.0f) : v;
}

// Where the activation passes the gradient: ReLU6's derivative, 1 without an activation.
__device__ __forceinline__ float passes(float x, float scale, float shift, bool relu6) {
  const float v = affine(x, scale, shift);
  return !relu6 || (v > 0.0f && v < 6.0f) ? 1.0f : 0.0f;
}

// Eight consecutive channels c..c+7 of one row, normalized; c is a multiple of 8, so the scales
// and shifts come as float4 pairs.
__device__ __forceinline__ uint4 apply8(uint4 raw, const float* scale, const float* shift, int c,
                                        bool relu6) {
  const float4 s0 = reinterpret_cast<const float4*>(scale + c)[0];
  const float4 s1 = reinterpret_cast<const float4*>(scale + c)[1];
  const float4 t0 = reinterpret_cast<const float4*>(shift + c)[0];
  const float4 t1 = reinterpret_cast<const float4*>(shift + c)[1];
  const float sc[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
  const float sh[8] = {t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z, t1.w};
  __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(h[i]);
    h[i] = __floats2half2_rn(apply(v.x, sc[2 * i], sh[2 * i], relu6),
                             apply(v.y, sc[2 * i + 1], sh[2 * i + 1], relu6));
  }
  return raw;
}

// What the channel sums add for each element: the forward's batch norm sums z and z^2; the
// backward of the previous batch norm sums dy = g w passed by the activation, and dy * x.
enum class Sums { output, input_gradient };

// The pair one element adds, v being z (output) or g w (input_gradient) as stored in f16.
template <Sums kSums>
__device__ __forceinline__ float2 pair(float v, float x, float scale, float shift, bool relu6) {
  if constexpr (kSums == Sums::output) {
    return make_float2(v, v * v);
  } else {
    const float dy = v * passes(x, scale, shift, relu6);
    return make_float2(dy, dy * x);
  }
}

// ---- today's passes ---------------------------------------------------------------------------

// a = f(x), 8 channels a thread and step.
__global__ void normalize_kernel(const __half* __restrict__ x, const float* __restrict__ scale,
                                 const float* __restrict__ shift, __half* __restrict__ a,
                                 long vectors, int k, bool relu6) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < vectors;
       i += long{gridDim.x} * blockDim.x) {
    const int c = static_cast<int>(i * 8 % k);
    reinterpret_cast<uint4*>(a)[i] =
        apply8(reinterpret_cast<const uint4*>(x)[i], scale, shift, c, relu6);
  }
}

// Each channel's pair summed over the 128-row tiles blockIdx.x, blockIdx.x + gridDim.x, ... of
// v ([rows][n]; x, scale and shift are [rows][n] and [n] too, read for input_gradient only):
// partial row blockIdx.x.
template <Sums kSums>
__global__ void channel_sums_kernel(const __half* __restrict__ v, const __half* __restrict__ x,
                                    const float* __restrict__ scale,
                                    const float* __restrict__ shift, bool relu6, long rows, int n,
                                    float* __restrict__ part_first,
                                    float* __restrict__ part_second) {
  __shared__ float sums[2][kThreads * 8];
  const int vectors = n / 8;             // at most 160 (1,280 channels)
  const int lanes = kThreads / vectors;  // rows read side by side
  const int col = threadIdx.x % vectors, lane = threadIdx.x / vectors;
  float first[8] = {}, second[8] = {};
  if (lane < lanes) {
    for (long row0 = blockIdx.x * long{kRowsPerBlock}; row0 < rows;
         row0 += gridDim.x * long{kRowsPerBlock}) {
      const int here = rows - row0 < kRowsPerBlock ? static_cast<int>(rows - row0) : kRowsPerBlock;
      for (int r = lane; r < here; r += lanes) {
        const long at = (row0 + r) * n + col * 8;
        uint4 raw = *reinterpret_cast<const uint4*>(v + at), raw_x = make_uint4(0, 0, 0, 0);
        if constexpr (kSums == Sums::input_gradient)
          raw_x = *reinterpret_cast<const uint4*>(x + at);
        const __half* h = reinterpret_cast<const __half*>(&raw);
        const __half* hx = reinterpret_cast<const __half*>(&raw_x);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int c = col * 8 + i;
          const float2 p =
              kSums == Sums::output
                  ? pair<kSums>(__half2float(h[i]), 0.0f, 0.0f, 0.0f, false)
                  : pair<kSums>(__half2float(h[i]), __half2float(hx[i]), scale[c], shift[c], relu6);
          first[i] += p.x;
          second[i] += p.y;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      sums[0][lane * n + col * 8 + i] = first[i];
      sums[1][lane * n + col * 8 + i] = second[i];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < n; c += kThreads) {
    float a = 0, b = 0;
    for (int l = 0; l < lanes; ++l) {
      a += sums[0][l * n + c];
      b += sums[1][l * n + c];
    }
    part_first[blockIdx.x * long{n} + c] = a;
    part_second[blockIdx.x * long{n} + c] = b;
  }
}

// Adds the partial rows: 32 channels a block, 8 rows of threads striding over the partials.
__global__ void finish_kernel(const float* __restrict__ part_first,
                              const float* __restrict__ part_second, int parts, int n,
                              float* __restrict__ first, float* __restrict__ second) {
  __shared__ float red[2][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x % 32, lane = threadIdx.x / 32;
  float a = 0, b = 0;
  if (c < n) {
    for (int p = lane; p < parts; p += 8) {
      a += part_first[long{p} * n + c];
      b += part_second[long{p} * n + c];
    }
  }
  red[0][lane][threadIdx.x % 32] = a;
  red[1][lane][threadIdx.x % 32] = b;
  __syncthreads();
  if (lane == 0 && c < n) {
    for (int l = 1; l < 8; ++l) {
      a += red[0][l][threadIdx.x];
      b += red[1][l][threadIdx.x];
    }
    first[c] = a;
    second[c] = b;
  }
}

// Adds the weight gradient's partials: dw[i] = the sum over the splits of part[split][i].
__global__ void reduce_splits_kernel(const float* __restrict__ part, int splits, long count,
                                     float* __restrict__ dw) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < count;
       i += long{gridDim.x} * blockDim.x) {
    float s = 0;
    for (int p = 0; p < splits; ++p) s += part[p * count + i];
    dw[i] = s;
  }
}

// ---- fused: z = f(x) w^T with z's sums, and g w with the previous batch norm's sums -----------

// One tile: kRowsPerBlock rows of the output by kCols of its channels; channels past the depth
// or the width are zeros in shared memory.
template <int kCols>
struct TileShared {
  static constexpr int kWSide = kCols > kDepth ? kCols : kDepth;  // w's tile is square
  static constexpr int kWLd = kWSide + kPad;
  union {
    struct {
      __half a[kRowsPerBlock][kDepth + kPad];  // this step's slice of the rows' depth
      // The weights of the tile's columns for this step: w[column][depth] for the forward,
      // w[depth][column] for the input gradient (there the summed dimension is w's first).
      __half w[kWSide][kWLd];
    } in;
    float out[kRowsPerBlock][kCols + 4];  // the finished tile, for the stores and the sums
  };
  float sums[2][kThreads];
};

// out[rows][width] = a w^T (output: a = f(x), depth k, width n) or g w (input_gradient: a = g,
// depth n, width k), stored in f16, with each column's pair summed over the rows a block covers:
// one partial row per block (blockIdx.y), the block striding over the 128-row tiles.
// For input_gradient, x/scale/shift are the previous layer's, [rows][width]; for output, they
// give f on load. At most 80 registers for 64 columns, 64 for fewer.
template <int kCols, Sums kSums>
__global__ void __launch_bounds__(kThreads, kCols == 64 ? 3 : 4)
    fused_gemm_kernel(const __half* __restrict__ a_src, const __half* __restrict__ w,
                      const __half* __restrict__ x, const float* __restrict__ scale,
                      const float* __restrict__ shift, bool relu6, __half* __restrict__ out,
                      float* __restrict__ part_first, float* __restrict__ part_second, long rows,
                      int depth, int width) {
  static_assert(kCols % 16 == 0 && kThreads % kCols == 0 && kCols <= 64, "16, 32 or 64 columns");
  constexpr bool kForward = kSums == Sums::output;
  __shared__ __align__(128) TileShared<kCols> sh;
  constexpr int kFrags = kCols / 16;
  constexpr int kVecPerRow = kDepth / 8;
  constexpr int kAVecs = kRowsPerBlock * kVecPerRow / kThreads;  // vectors a thread moves: 2
  constexpr int kWVecs = kCols * kDepth / 8;                     // w vectors a step, <= kThreads
  constexpr int kLanes = kThreads / kCols;  // threads that share a column's sums
  constexpr int kWLd = TileShared<kCols>::kWLd;
  // blockIdx.x walks the column tiles fastest, so the tiles that read the same rows run side by
  // side and all but the first find them in L2.
  const int col0 = blockIdx.x * kCols;
  const int warp = threadIdx.x / 32, col = threadIdx.x % kCols, lane = threadIdx.x / kCols;
  float first = 0, second = 0;
  // Thread t moves vectors t, t + kThreads, ... of the tile at row0's slice at depth0, as loaded:
  // f is applied as they are stored to shared memory, a step later, so that nothing waits for a
  // load where it is issued.
  auto load_a = [&](long row0, int depth0, int i) -> uint4 {
    const int e = threadIdx.x + i * kThreads, r = e / kVecPerRow;
    const int c = depth0 + e % kVecPerRow * 8;
    if (row0 + r >= rows || c >= depth) return make_uint4(0, 0, 0, 0);
    return *reinterpret_cast<const uint4*>(a_src + (row0 + r) * depth + c);
  };
  // Thread t moves w's vector t of this step: forward, row col0 + t / 4 (a column of the tile)
  // at depth depth0 + t % 4 * 8; input gradient, row depth0 + t / (kCols / 8) (a depth) at
  // column col0 + t % (kCols / 8) * 8.
  auto load_w = [&](int depth0) -> uint4 {
    if (threadIdx.x >= kWVecs) return make_uint4(0, 0, 0, 0);
    if constexpr (kForward) {
      const int r = threadIdx.x / kVecPerRow, c = depth0 + threadIdx.x % kVecPerRow * 8;
      if (col0 + r >= width || c >= depth) return make_uint4(0, 0, 0, 0);
      return *reinterpret_cast<const uint4*>(w + long{col0 + r} * depth + c);
    } else {
      const int r = depth0 + threadIdx.x / (kCols / 8), c = col0 + threadIdx.x % (kCols / 8) * 8;
      if (r >= depth || c >= width) return make_uint4(0, 0, 0, 0);
      return *reinterpret_cast<const uint4*>(w + long{r} * width + c);
    }
  };
  auto store_w = [&](uint4 v) {
    if (threadIdx.x >= kWVecs) return;
    if constexpr (kForward) {
      *reinterpret_cast<uint4*>(&sh.in.w[threadIdx.x / kVecPerRow][threadIdx.x % kVecPerRow * 8]) =
          v;
    } else {
      *reinterpret_cast<uint4*>(
          &sh.in.w[threadIdx.x / (kCols / 8)][threadIdx.x % (kCols / 8) * 8]) = v;
    }
  };

  // The next step's vectors are loaded before this step's products, so their latency hides; after
  // a tile's last step they are the next tile's first, loaded before this tile's products and its
  // epilogue. Without that, a tile of a narrow layer (one or two steps) waits for its loads with
  // nothing else in flight, and the kernel streams at a third of the HBM rate (session 33).
  const long stride = gridDim.y * long{kRowsPerBlock};
  uint4 next_a[kAVecs], next_w = make_uint4(0, 0, 0, 0);
  if (blockIdx.y * long{kRowsPerBlock} < rows) {
    next_w = load_w(0);
#pragma unroll
    for (int i = 0; i < kAVecs; ++i) next_a[i] = load_a(blockIdx.y * long{kRowsPerBlock}, 0, i);
  }
  for (long row0 = blockIdx.y * long{kRowsPerBlock}; row0 < rows; row0 += stride) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f) wmma::fill_fragment(acc[f], 0.0f);

    for (int depth0 = 0; depth0 < depth; depth0 += kDepth) {
#pragma unroll
      for (int i = 0; i < kAVecs; ++i) {
        const int e = threadIdx.x + i * kThreads, c = depth0 + e % kVecPerRow * 8;
        // Past the depth the vector stays zeros (and scale and shift are not read there).
        const uint4 v =
            kForward && c < depth ? apply8(next_a[i], scale, shift, c, relu6) : next_a[i];
        *reinterpret_cast<uint4*>(&sh.in.a[e / kVecPerRow][e % kVecPerRow * 8]) = v;
      }
      store_w(next_w);
      __syncthreads();
      if (depth0 + kDepth < depth) {
#pragma unroll
        for (int i = 0; i < kAVecs; ++i) next_a[i] = load_a(row0, depth0 + kDepth, i);
        next_w = load_w(depth0 + kDepth);
      } else if (row0 + stride < rows) {
#pragma unroll
        for (int i = 0; i < kAVecs; ++i) next_a[i] = load_a(row0 + stride, 0, i);
        next_w = load_w(0);
      }
#pragma unroll
      for (int step = 0; step < kDepth / 16; ++step) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::load_matrix_sync(a, &sh.in.a[warp * 16][step * 16], kDepth + kPad);
#pragma unroll
        for (int f = 0; f < kFrags; ++f) {
          if constexpr (kForward) {
            // w[column][depth]: as a 16x16 block of w^T it is column-major.
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
            wmma::load_matrix_sync(b, &sh.in.w[f * 16][step * 16], kWLd);
            wmma::mma_sync(acc[f], a, b, acc[f]);
          } else {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
            wmma::load_matrix_sync(b, &sh.in.w[step * 16][f * 16], kWLd);
            wmma::mma_sync(acc[f], a, b, acc[f]);
          }
        }
      }
      __syncthreads();
    }

    // The tile goes through shared memory: stored as f16, and summed as the stored values.
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
      wmma::store_matrix_sync(&sh.out[warp * 16][f * 16], acc[f], kCols + 4, wmma::mem_row_major);
    }
    __syncthreads();
    const int here = rows - row0 < kRowsPerBlock ? static_cast<int>(rows - row0) : kRowsPerBlock;
    for (int e = threadIdx.x; e < kRowsPerBlock * kCols / 8; e += kThreads) {
      const int r = e / (kCols / 8), c = e % (kCols / 8) * 8;
      uint4 stored;
      __half2* h = reinterpret_cast<__half2*>(&stored);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        h[i] = __floats2half2_rn(sh.out[r][c + 2 * i], sh.out[r][c + 2 * i + 1]);
        const float2 rounded = __half22float2(h[i]);
        sh.out[r][c + 2 * i] = rounded.x;
        sh.out[r][c + 2 * i + 1] = rounded.y;
      }
      if (r < here && col0 + c < width) {
        *reinterpret_cast<uint4*>(out + (row0 + r) * width + col0 + c) = stored;
      }
    }
    __syncthreads();
    if (col0 + col < width) {
      for (int r = lane; r < here; r += kLanes) {
        const float xv = kForward ? 0.0f : __half2float(x[(row0 + r) * width + col0 + col]);
        const float2 p =
            kForward ? pair<kSums>(sh.out[r][col], 0.0f, 0.0f, 0.0f, false)
                     : pair<kSums>(sh.out[r][col], xv, scale[col0 + col], shift[col0 + col], relu6);
        first += p.x;
        second += p.y;
      }
    }
    __syncthreads();  // the next tile's inputs overwrite sh.out
  }
  sh.sums[0][threadIdx.x] = first;
  sh.sums[1][threadIdx.x] = second;
  __syncthreads();
  if (threadIdx.x < kCols && col0 + threadIdx.x < width) {
    float a = 0, b = 0;
    for (int l = 0; l < kLanes; ++l) {
      a += sh.sums[0][l * kCols + threadIdx.x];
      b += sh.sums[1][l * kCols + threadIdx.x];
    }
    part_first[blockIdx.y * long{width} + col0 + threadIdx.x] = a;
    part_second[blockIdx.y * long{width} + col0 + threadIdx.x] = b;
  }
}

// ---- fused: the weight gradient g^T f(x), f applied as x loads ---------------------------------

constexpr int kGradTile = 64;  // the weight gradient's tile: 64 output by 64 input channels
constexpr int kGradRows = 32;  // rows summed a step
struct GradShared {
  __half g[kGradRows][kGradTile + kPad];  // g's rows, this tile's output channels
  __half a[kGradRows][kGradTile + kPad];  // f(x)'s rows, this tile's input channels
};

// part[split][n][k] = sum over the rows of split (blockIdx.z; 32-row steps blockIdx.z,
// blockIdx.z + gridDim.z, ...) of g[row][n] f(x)[row][k], for the 64x64 tile (blockIdx.y over
// n, blockIdx.x over k). Warp w holds the tile's rows 16 (w / 2)..+15 of n and columns
// 32 (w % 2)..+31 of k: two fragments.
__global__ void __launch_bounds__(kThreads, 3)
    fused_weight_gradient_kernel(const __half* __restrict__ g, const __half* __restrict__ x,
                                 const float* __restrict__ scale, const float* __restrict__ shift,
                                 bool relu6, long rows, int n, int k, float* __restrict__ part) {
  __shared__ __align__(128) GradShared sh;
  const int n0 = blockIdx.y * kGradTile, k0 = blockIdx.x * kGradTile;
  const int warp = threadIdx.x / 32, wn = warp / 2 * 16, wk = warp % 2 * 32;
  // Thread t moves vector t of a step: row t / 8, channels t % 8 * 8.. of the tile, of g and x.
  const int r = threadIdx.x / (kGradTile / 8), c = threadIdx.x % (kGradTile / 8) * 8;
  const long steps = (rows + kGradRows - 1) / kGradRows;
  auto load = [&](long step, uint4& gv, uint4& av) {
    const long row = step * kGradRows + r;
    gv = av = make_uint4(0, 0, 0, 0);
    if (step >= steps || row >= rows) return;
    if (n0 + c < n) gv = *reinterpret_cast<const uint4*>(g + row * n + n0 + c);
    if (k0 + c < k) av = *reinterpret_cast<const uint4*>(x + row * k + k0 + c);
  };
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
  wmma::fill_fragment(acc[0], 0.0f);
  wmma::fill_fragment(acc[1], 0.0f);
  uint4 next_g, next_a;
  load(blockIdx.z, next_g, next_a);
  for (long step = blockIdx.z; step < steps; step += gridDim.z) {
    // f is applied here, a step after the load, so that the load's latency hides behind the
    // products; rows past the end and channels past k stay zeros.
    const bool live = step * kGradRows + r < rows && k0 + c < k;
    *reinterpret_cast<uint4*>(&sh.g[r][c]) = next_g;
    *reinterpret_cast<uint4*>(&sh.a[r][c]) =
        live ? apply8(next_a, scale, shift, k0 + c, relu6) : next_a;
    __syncthreads();
    load(step + gridDim.z, next_g, next_a);
#pragma unroll
    for (int half = 0; half < kGradRows / 16; ++half) {
      // g^T's 16x16 block (n by rows) is g's block read column-major.
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major> ga;
      wmma::load_matrix_sync(ga, &sh.g[half * 16][wn], kGradTile + kPad);
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> ab;
        wmma::load_matrix_sync(ab, &sh.a[half * 16][wk + f * 16], kGradTile + kPad);
        wmma::mma_sync(acc[f], ga, ab, acc[f]);
      }
    }
    __syncthreads();
  }
  // Fragments go to this split's partial tile; only the rows and columns inside n and k.
  __shared__ __align__(32) float out[kGradTile][kGradTile + 4];
  wmma::store_matrix_sync(&out[wn][wk], acc[0], kGradTile + 4, wmma::mem_row_major);
  wmma::store_matrix_sync(&out[wn][wk + 16], acc[1], kGradTile + 4, wmma::mem_row_major);
  __syncthreads();
  float* split = part + blockIdx.z * long{n} * k;
  for (int e = threadIdx.x; e < kGradTile * kGradTile; e += kThreads) {
    const int i = e / kGradTile, j = e % kGradTile;
    if (n0 + i < n && k0 + j < k) split[long{n0 + i} * k + k0 + j] = out[i][j];
  }
}

}  // namespace pointwise_probe
