// Can a 1x1 convolution that normalizes its input as it loads it, and sums its output's channel
// statistics as it stores it, beat today's three passes? The question behind issue 16's HBM goal
// (bench/RESULTS.md, "What the HBM goal asks"): batch norm's normalize and statistics passes take
// 3-4 ms of MobileNetV2's f16 step, and they exist because cuBLAS's GEMMs can neither apply the
// previous batch norm to their input nor sum their output. A standalone CUDA program, not linked
// with frugal; `build-gpu/fused_pointwise_probe` prints a line per shape and exits 1 on a wrong
// result.
//
// For each 1x1 convolution of MobileNetV2's forward (f16, batch 128, 224x224; rows = N*H*W pixels
// of NHWC, K input and N output channels), with f(x) = clamp(x * scale + shift, 0, 6) per input
// channel (the batch norm and ReLU6 before a projection; the expansions take the batch norm alone):
// - three passes: a = f(x) written out, cuBLAS z = a W^T, then z read again for each channel's
//   sum and sum of squares (a partial row per block, and a finish that adds them);
// - fused: one kernel loads x, applies f in registers, multiplies on the tensor cores (WMMA,
//   f32 accumulation), writes z and the same partials from the tile it holds; the same finish.
// Both read the weights and write the same z and statistics. Times are medians over replayed
// CUDA graphs that rotate among enough input sets to keep the working set above the 50 MB L2.
// Left out: the residual sums some expansions read (a block's output is stored for its skip, so
// there the fused form saves the statistics pass alone) and the backward pass.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace wmma = nvcuda::wmma;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "fused_pointwise_probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "fused_pointwise_probe: %s: cuBLAS status %d\n", what, int(s));
    std::exit(1);
  }
}

struct Shape {
  long rows;
  int k, n;
  bool relu6;  // the input's batch norm is followed by ReLU6 (projections), or not (expansions)
  int count;   // how many of MobileNetV2's 1x1 convolutions have this shape
};

// MobileNetV2's 34 pointwise convolutions at batch 128, 224x224.
constexpr Shape kShapes[] = {
    {128L * 112 * 112, 32, 16, true, 1}, {128L * 112 * 112, 16, 96, false, 1},
    {128L * 56 * 56, 96, 24, true, 1},   {128L * 56 * 56, 24, 144, false, 2},
    {128L * 56 * 56, 144, 24, true, 1},  {128L * 28 * 28, 144, 32, true, 1},
    {128L * 28 * 28, 32, 192, false, 3}, {128L * 28 * 28, 192, 32, true, 2},
    {128L * 14 * 14, 192, 64, true, 1},  {128L * 14 * 14, 64, 384, false, 4},
    {128L * 14 * 14, 384, 64, true, 3},  {128L * 14 * 14, 384, 96, true, 1},
    {128L * 14 * 14, 96, 576, false, 3}, {128L * 14 * 14, 576, 96, true, 2},
    {128L * 7 * 7, 576, 160, true, 1},   {128L * 7 * 7, 160, 960, false, 3},
    {128L * 7 * 7, 960, 160, true, 2},   {128L * 7 * 7, 960, 320, true, 1},
    {128L * 7 * 7, 320, 1280, false, 1},
};

constexpr int kRowsPerBlock = 128;  // rows of one tile
constexpr int kDepth = 32;          // input channels a tile holds at once
constexpr int kThreads = 256;       // 8 warps: warp w computes rows 16w..16w+15 of the tile
constexpr int kPad = 8;             // halves after each shared row, against bank conflicts

__device__ __forceinline__ float apply(float x, float scale, float shift, bool relu6) {
  float v = fmaf(x, scale, shift);
  return relu6 ? fminf(fmaxf(v, 0.0f), 6.0f) : v;
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

// ---- the three passes -------------------------------------------------------------------------

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

// Sum and sum of squares of each channel of z over the 128-row tiles blockIdx.x, blockIdx.x +
// gridDim.x, ...: partial row blockIdx.x.
__global__ void statistics_kernel(const __half* __restrict__ z, long rows, int n,
                                  float* __restrict__ part_sum, float* __restrict__ part_sq) {
  __shared__ float sums[2][kThreads * 8];
  const int vectors = n / 8;             // at most 160 (1,280 channels)
  const int lanes = kThreads / vectors;  // rows read side by side
  const int v = threadIdx.x % vectors, lane = threadIdx.x / vectors;
  float s[8] = {}, q[8] = {};
  if (lane < lanes) {
    for (long first = blockIdx.x * long{kRowsPerBlock}; first < rows;
         first += gridDim.x * long{kRowsPerBlock}) {
      const int here =
          rows - first < kRowsPerBlock ? static_cast<int>(rows - first) : kRowsPerBlock;
      for (int r = lane; r < here; r += lanes) {
        uint4 raw = reinterpret_cast<const uint4*>(z + (first + r) * n)[v];
        const __half* h = reinterpret_cast<const __half*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float f = __half2float(h[i]);
          s[i] += f;
          q[i] = fmaf(f, f, q[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      sums[0][lane * n + v * 8 + i] = s[i];
      sums[1][lane * n + v * 8 + i] = q[i];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < n; c += kThreads) {
    float ts = 0, tq = 0;
    for (int l = 0; l < lanes; ++l) {
      ts += sums[0][l * n + c];
      tq += sums[1][l * n + c];
    }
    part_sum[blockIdx.x * long{n} + c] = ts;
    part_sq[blockIdx.x * long{n} + c] = tq;
  }
}

// ---- the fused kernel -------------------------------------------------------------------------

// One tile: kRowsPerBlock rows of z by kCols channels. Requires k and n to be multiples of 8
// (every MobileNetV2 layer's are); channels past k or n are zeros in shared memory.
template <int kCols>
struct FusedShared {
  union {
    struct {
      __half a[kRowsPerBlock][kDepth + kPad];  // f(x), this step's input channels
      __half w[kCols][kDepth + kPad];          // the weights' rows for the tile's channels
    } in;
    float z[kRowsPerBlock][kCols + 4];  // the finished tile, for the stores and statistics
  };
  float sums[2][kThreads];
};

// At most 80 registers for 64 columns, 64 for fewer: three or four blocks a multiprocessor.
template <int kCols>
__global__ void __launch_bounds__(kThreads, kCols == 64 ? 3 : 4)
    fused_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                 const float* __restrict__ scale, const float* __restrict__ shift,
                 __half* __restrict__ z, float* __restrict__ part_sum, float* __restrict__ part_sq,
                 long rows, int k, int n, bool relu6) {
  static_assert(kCols % 16 == 0 && kThreads % kCols == 0, "tile columns: 16, 32 or 64");
  __shared__ __align__(128) FusedShared<kCols> sh;
  constexpr int kFrags = kCols / 16;
  constexpr int kVecPerRow = kDepth / 8;
  constexpr int kAVecs = kRowsPerBlock * kVecPerRow / kThreads;  // x vectors a thread moves: 2
  constexpr int kWVecs = kCols * kVecPerRow;                     // w vectors a step, <= kThreads
  constexpr int kLanes = kThreads / kCols;  // threads that share a column's statistics
  // blockIdx.x walks the channel tiles fastest, so the tiles that read the same rows of x run
  // side by side and all but the first find them in L2. Each block strides over the row tiles
  // and keeps its statistics across them: one partial row a block, not a tile.
  const int col0 = blockIdx.x * kCols;
  const int warp = threadIdx.x / 32, col = threadIdx.x % kCols, lane = threadIdx.x / kCols;
  float s = 0, q = 0;
  for (long row0 = blockIdx.y * long{kRowsPerBlock}; row0 < rows;
       row0 += gridDim.y * long{kRowsPerBlock}) {
    auto load_a = [&](int depth0, int i) -> uint4 {
      const int e = threadIdx.x + i * kThreads, r = e / kVecPerRow;
      const int c = depth0 + e % kVecPerRow * 8;
      if (row0 + r >= rows || c >= k) return make_uint4(0, 0, 0, 0);
      return apply8(*reinterpret_cast<const uint4*>(x + (row0 + r) * k + c), scale, shift, c,
                    relu6);
    };
    auto load_w = [&](int depth0) -> uint4 {
      const int r = threadIdx.x / kVecPerRow, c = depth0 + threadIdx.x % kVecPerRow * 8;
      if (threadIdx.x >= kWVecs || col0 + r >= n || c >= k) return make_uint4(0, 0, 0, 0);
      return *reinterpret_cast<const uint4*>(w + long{col0 + r} * k + c);
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f) wmma::fill_fragment(acc[f], 0.0f);

    // The next step's vectors are loaded before this step's products, so their latency hides.
    uint4 next_a[kAVecs], next_w = load_w(0);
#pragma unroll
    for (int i = 0; i < kAVecs; ++i) next_a[i] = load_a(0, i);
    for (int depth0 = 0; depth0 < k; depth0 += kDepth) {
#pragma unroll
      for (int i = 0; i < kAVecs; ++i) {
        const int e = threadIdx.x + i * kThreads;
        *reinterpret_cast<uint4*>(&sh.in.a[e / kVecPerRow][e % kVecPerRow * 8]) = next_a[i];
      }
      if (threadIdx.x < kWVecs) {
        *reinterpret_cast<uint4*>(
            &sh.in.w[threadIdx.x / kVecPerRow][threadIdx.x % kVecPerRow * 8]) = next_w;
      }
      __syncthreads();
      if (depth0 + kDepth < k) {
#pragma unroll
        for (int i = 0; i < kAVecs; ++i) next_a[i] = load_a(depth0 + kDepth, i);
        next_w = load_w(depth0 + kDepth);
      }
#pragma unroll
      for (int step = 0; step < kDepth / 16; ++step) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::load_matrix_sync(a, &sh.in.a[warp * 16][step * 16], kDepth + kPad);
#pragma unroll
        for (int f = 0; f < kFrags; ++f) {
          // w is [channel][input channel]: as a 16x16 block of W^T it is column-major.
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
          wmma::load_matrix_sync(b, &sh.in.w[f * 16][step * 16], kDepth + kPad);
          wmma::mma_sync(acc[f], a, b, acc[f]);
        }
      }
      __syncthreads();
    }

    // The tile goes through shared memory: stored as f16, and summed as the stored values.
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
      wmma::store_matrix_sync(&sh.z[warp * 16][f * 16], acc[f], kCols + 4, wmma::mem_row_major);
    }
    __syncthreads();
    const int here = rows - row0 < kRowsPerBlock ? static_cast<int>(rows - row0) : kRowsPerBlock;
    for (int e = threadIdx.x; e < kRowsPerBlock * kCols / 8; e += kThreads) {
      const int r = e / (kCols / 8), c = e % (kCols / 8) * 8;
      uint4 out;
      __half2* h = reinterpret_cast<__half2*>(&out);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        h[i] = __floats2half2_rn(sh.z[r][c + 2 * i], sh.z[r][c + 2 * i + 1]);
        const float2 rounded = __half22float2(h[i]);
        sh.z[r][c + 2 * i] = rounded.x;
        sh.z[r][c + 2 * i + 1] = rounded.y;
      }
      if (r < here && col0 + c < n) *reinterpret_cast<uint4*>(z + (row0 + r) * n + col0 + c) = out;
    }
    __syncthreads();
    for (int r = lane; r < here; r += kLanes) {
      const float v = sh.z[r][col];
      s += v;
      q = fmaf(v, v, q);
    }
    __syncthreads();  // the next tile's inputs overwrite sh.z
  }
  sh.sums[0][threadIdx.x] = s;
  sh.sums[1][threadIdx.x] = q;
  __syncthreads();
  if (threadIdx.x < kCols && col0 + threadIdx.x < n) {
    float ts = 0, tq = 0;
    for (int l = 0; l < kLanes; ++l) {
      ts += sh.sums[0][l * kCols + threadIdx.x];
      tq += sh.sums[1][l * kCols + threadIdx.x];
    }
    part_sum[blockIdx.y * long{n} + col0 + threadIdx.x] = ts;
    part_sq[blockIdx.y * long{n} + col0 + threadIdx.x] = tq;
  }
}

// Adds the partial rows: 32 channels a block, 8 rows of threads striding over the partials.
__global__ void finish_kernel(const float* __restrict__ part_sum, const float* __restrict__ part_sq,
                              int parts, int n, float* __restrict__ sum, float* __restrict__ sq) {
  __shared__ float red[2][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x % 32, lane = threadIdx.x / 32;
  float s = 0, q = 0;
  if (c < n) {
    for (int p = lane; p < parts; p += 8) {
      s += part_sum[long{p} * n + c];
      q += part_sq[long{p} * n + c];
    }
  }
  red[0][lane][threadIdx.x % 32] = s;
  red[1][lane][threadIdx.x % 32] = q;
  __syncthreads();
  if (lane == 0 && c < n) {
    for (int l = 1; l < 8; ++l) {
      s += red[0][l][threadIdx.x];
      q += red[1][l][threadIdx.x];
    }
    sum[c] = s;
    sq[c] = q;
  }
}

// ---- the harness ------------------------------------------------------------------------------

struct Buffers {  // one input set: x, its normalized copy and z, with the statistics of z
  __half *x, *a, *z;
  float *part_sum, *part_sq, *sum, *sq;
};

struct Layer {
  Shape shape;
  __half* w;
  float *scale, *shift;
  std::vector<Buffers> sets;
  // Partial rows of statistics, the same in both versions: one per block, at most 8 blocks for
  // each of the H200's 132 multiprocessors, each striding over the 128-row tiles.
  long parts() const {
    return std::min<long>((shape.rows + kRowsPerBlock - 1) / kRowsPerBlock, 8 * 132);
  }
};

int columns_for(int n) { return n <= 16 ? 16 : n <= 32 ? 32 : 64; }

void run_three_passes(const Layer& l, const Buffers& b, cublasHandle_t blas, cudaStream_t s) {
  const Shape& sh = l.shape;
  const long vectors = sh.rows * sh.k / 8;
  normalize_kernel<<<static_cast<int>(std::min<long>((vectors + kThreads - 1) / kThreads, 8 * 132)),
                     kThreads, 0, s>>>(b.x, l.scale, l.shift, b.a, vectors, sh.k, sh.relu6);
  check(cudaGetLastError(), "normalize launch");
  // Column-major cuBLAS sees z^T (n x rows) = W (n x k, stored as its k x n transpose) a^T.
  const float one = 1.0f, zero = 0.0f;
  check(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, static_cast<int>(sh.rows), sh.k, &one,
                     l.w, CUDA_R_16F, sh.k, b.a, CUDA_R_16F, sh.k, &zero, b.z, CUDA_R_16F, sh.n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  statistics_kernel<<<static_cast<int>(l.parts()), kThreads, 0, s>>>(b.z, sh.rows, sh.n, b.part_sum,
                                                                     b.part_sq);
  check(cudaGetLastError(), "statistics launch");
  finish_kernel<<<(sh.n + 31) / 32, kThreads, 0, s>>>(
      b.part_sum, b.part_sq, static_cast<int>(l.parts()), sh.n, b.sum, b.sq);
  check(cudaGetLastError(), "finish launch");
}

void run_fused(const Layer& l, const Buffers& b, cudaStream_t s) {
  const Shape& sh = l.shape;
  const int cols = columns_for(sh.n);
  const dim3 grid((sh.n + cols - 1) / cols, static_cast<unsigned>(l.parts()));
  if (cols == 16) {
    fused_kernel<16><<<grid, kThreads, 0, s>>>(b.x, l.w, l.scale, l.shift, b.z, b.part_sum,
                                               b.part_sq, sh.rows, sh.k, sh.n, sh.relu6);
  } else if (cols == 32) {
    fused_kernel<32><<<grid, kThreads, 0, s>>>(b.x, l.w, l.scale, l.shift, b.z, b.part_sum,
                                               b.part_sq, sh.rows, sh.k, sh.n, sh.relu6);
  } else {
    fused_kernel<64><<<grid, kThreads, 0, s>>>(b.x, l.w, l.scale, l.shift, b.z, b.part_sum,
                                               b.part_sq, sh.rows, sh.k, sh.n, sh.relu6);
  }
  check(cudaGetLastError(), "fused launch");
  finish_kernel<<<(sh.n + 31) / 32, kThreads, 0, s>>>(
      b.part_sum, b.part_sq, static_cast<int>(l.parts()), sh.n, b.sum, b.sq);
  check(cudaGetLastError(), "finish launch");
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d;
  check(cudaMalloc(&d, host.size() * sizeof(T)), "malloc");
  check(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

template <typename T>
std::vector<T> host_copy(const T* d, size_t count) {
  std::vector<T> host(count);
  check(cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return host;
}

Layer make_layer(const Shape& sh, std::mt19937& rng) {
  Layer l{sh};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<__half> w(static_cast<size_t>(sh.n) * sh.k);
  for (auto& v : w) v = __float2half(uniform(rng) / std::sqrt(float(sh.k)));
  std::vector<float> scale(sh.k), shift(sh.k);
  for (int c = 0; c < sh.k; ++c) {
    scale[c] = 1.0f + 0.5f * uniform(rng);
    shift[c] = 0.5f * uniform(rng);
  }
  l.w = device_copy(w);
  l.scale = device_copy(scale);
  l.shift = device_copy(shift);
  // Enough sets that one round of them is over twice the L2 (50 MB on the H200).
  const double set_bytes = 2.0 * sh.rows * (2.0 * sh.k + sh.n);
  const int sets = static_cast<int>(std::clamp(std::ceil(100e6 / set_bytes), 1.0, 16.0));
  std::vector<__half> x(static_cast<size_t>(sh.rows) * sh.k);
  for (int i = 0; i < sets; ++i) {
    for (auto& v : x) v = __float2half(normal(rng));
    Buffers b;
    b.x = device_copy(x);
    check(cudaMalloc(&b.a, x.size() * sizeof(__half)), "malloc");
    check(cudaMalloc(&b.z, static_cast<size_t>(sh.rows) * sh.n * sizeof(__half)), "malloc");
    check(cudaMalloc(&b.part_sum, l.parts() * sh.n * sizeof(float)), "malloc");
    check(cudaMalloc(&b.part_sq, l.parts() * sh.n * sizeof(float)), "malloc");
    check(cudaMalloc(&b.sum, sh.n * sizeof(float)), "malloc");
    check(cudaMalloc(&b.sq, sh.n * sizeof(float)), "malloc");
    l.sets.push_back(b);
  }
  return l;
}

void free_layer(Layer& l) {
  for (Buffers& b : l.sets) {
    for (void* p : {static_cast<void*>(b.x), static_cast<void*>(b.a), static_cast<void*>(b.z),
                    static_cast<void*>(b.part_sum), static_cast<void*>(b.part_sq),
                    static_cast<void*>(b.sum), static_cast<void*>(b.sq)}) {
      check(cudaFree(p), "free");
    }
  }
  check(cudaFree(l.w), "free");
  check(cudaFree(l.scale), "free");
  check(cudaFree(l.shift), "free");
}

struct Errors {
  double z = 0, sum = 0, sq = 0;  // ||out - ref|| / ||ref||
};

// z of set 0 against a float64 reference on every 61st row (and the last), from the same f16
// inputs; the statistics against float64 sums of all of z as the kernel stored it. z is poisoned
// (0xFFFF, a NaN) first, so a row the kernel did not write fails.
Errors check_set(const Layer& l, bool fused, cublasHandle_t blas, cudaStream_t s) {
  const Shape& sh = l.shape;
  const Buffers& b = l.sets[0];
  const size_t z_count = static_cast<size_t>(sh.rows) * sh.n;
  check(cudaMemsetAsync(b.z, 0xFF, z_count * sizeof(__half), s), "poison");
  check(cudaMemsetAsync(b.sum, 0xFF, sh.n * sizeof(float), s), "poison");
  check(cudaMemsetAsync(b.sq, 0xFF, sh.n * sizeof(float), s), "poison");
  if (fused) {
    run_fused(l, b, s);
  } else {
    run_three_passes(l, b, blas, s);
  }
  check(cudaStreamSynchronize(s), "check run");
  const auto x = host_copy(b.x, static_cast<size_t>(sh.rows) * sh.k);
  const auto w = host_copy(l.w, static_cast<size_t>(sh.n) * sh.k);
  const auto scale = host_copy(l.scale, sh.k), shift = host_copy(l.shift, sh.k);
  const auto z = host_copy(b.z, z_count);
  const auto sum = host_copy(b.sum, sh.n), sq = host_copy(b.sq, sh.n);
  Errors e;
  double num = 0, den = 0;
  std::vector<double> a(sh.k);
  std::vector<long> sampled;
  for (long r = 0; r < sh.rows; r += 61) sampled.push_back(r);
  if (sampled.back() != sh.rows - 1) sampled.push_back(sh.rows - 1);
  for (long r : sampled) {
    for (int c = 0; c < sh.k; ++c) {
      // f(x) is rounded to f16 before the product, in both versions.
      const float v = std::fma(__half2float(x[r * sh.k + c]), scale[c], shift[c]);
      a[c] = __half2float(__float2half(sh.relu6 ? std::min(std::max(v, 0.0f), 6.0f) : v));
    }
    for (int o = 0; o < sh.n; ++o) {
      double ref = 0;
      for (int c = 0; c < sh.k; ++c) ref += a[c] * __half2float(w[long{o} * sh.k + c]);
      const double got = __half2float(z[r * sh.n + o]);
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  }
  e.z = std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
  std::vector<double> ref_sum(sh.n, 0.0), ref_sq(sh.n, 0.0);
  for (size_t i = 0; i < z_count; ++i) {
    const double v = __half2float(z[i]);
    ref_sum[i % sh.n] += v;
    ref_sq[i % sh.n] += v * v;
  }
  double ns = 0, ds = 0, nq = 0, dq = 0;
  for (int o = 0; o < sh.n; ++o) {
    ns += (sum[o] - ref_sum[o]) * (sum[o] - ref_sum[o]);
    ds += ref_sum[o] * ref_sum[o];
    nq += (sq[o] - ref_sq[o]) * (sq[o] - ref_sq[o]);
    dq += ref_sq[o] * ref_sq[o];
  }
  e.sum = std::isfinite(ns) ? std::sqrt(ns / ds) : INFINITY;
  e.sq = std::isfinite(nq) ? std::sqrt(nq / dq) : INFINITY;
  return e;
}

// Microseconds a layer: the median of 7 timings of 10 replays of a graph that runs the layer once
// on each input set.
template <typename Run>
float time_layer(const Layer& l, cudaStream_t s, Run run) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (const Buffers& b : l.sets) run(b);
  check(cudaStreamEndCapture(s, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphLaunch(exec, s), "warm-up replay");
  check(cudaStreamSynchronize(s), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<float> us;
  for (int t = 0; t < 7; ++t) {
    check(cudaEventRecord(start, s), "record");
    for (int r = 0; r < 10; ++r) check(cudaGraphLaunch(exec, s), "replay");
    check(cudaEventRecord(stop, s), "record");
    check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    us.push_back(ms * 1000.0f / (10.0f * l.sets.size()));
  }
  check(cudaEventDestroy(start), "event");
  check(cudaEventDestroy(stop), "event");
  check(cudaGraphExecDestroy(exec), "destroy");
  check(cudaGraphDestroy(graph), "destroy");
  std::nth_element(us.begin(), us.begin() + 3, us.end());
  return us[3];
}

}  // namespace

int main() {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cublasHandle_t blas;
  check(cublasCreate(&blas), "cublasCreate");
  check(cublasSetStream(blas, s), "cublasSetStream");
  // A workspace of its own, so that no GEMM allocates while a graph is captured.
  void* blas_workspace;
  check(cudaMalloc(&blas_workspace, 32 << 20), "malloc");
  check(cublasSetWorkspace(blas, blas_workspace, 32 << 20), "cublasSetWorkspace");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf(
      "%s: MobileNetV2's 1x1 convolutions, f16, batch 128; us a layer (median of 7 x 10 "
      "replays), HBM bound at 4.8 TB/s\n",
      prop.name);
  std::printf("%9s %4s %4s %5s | %8s %8s %7s | %6s | %8s %7s %7s | %9s\n", "rows", "k", "n", "act",
              "3 passes", "fused", "ratio", "bound", "z error", "sum err", "sq err", "cuBLAS");
  std::mt19937 rng(20261204);
  double total_passes = 0, total_fused = 0, total_bound = 0;
  bool ok = true;
  for (const Shape& sh : kShapes) {
    Layer l = make_layer(sh, rng);
    const Errors ep = check_set(l, false, blas, s);
    const Errors ef = check_set(l, true, blas, s);
    const float passes =
        time_layer(l, s, [&](const Buffers& b) { run_three_passes(l, b, blas, s); });
    const float fused = time_layer(l, s, [&](const Buffers& b) { run_fused(l, b, s); });
    // The GEMM alone, on the normalized input the passes left: what cuBLAS takes of the three.
    const float gemm = time_layer(l, s, [&](const Buffers& b) {
      const float one = 1.0f, zero = 0.0f;
      check(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, static_cast<int>(sh.rows), sh.k,
                         &one, l.w, CUDA_R_16F, sh.k, b.a, CUDA_R_16F, sh.k, &zero, b.z, CUDA_R_16F,
                         sh.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    });
    // The fewest bytes: x and the weights read once, z written once.
    const double bound = 2.0 * (sh.rows * double(sh.k + sh.n) + double(sh.k) * sh.n) / 4.8e12 * 1e6;
    // f16 products with f32 sums land near 1e-3 of the norm; sums of f16 values in f32, far under.
    const bool good = ep.z < 3e-3 && ef.z < 3e-3 && ep.sum < 1e-4 && ef.sum < 1e-4 &&
                      ep.sq < 1e-4 && ef.sq < 1e-4;
    ok = ok && good;
    std::printf("%9ld %4d %4d %5s | %8.1f %8.1f %6.2fx | %6.1f | %8.1e %7.1e %7.1e | %9.1f%s\n",
                sh.rows, sh.k, sh.n, sh.relu6 ? "relu6" : "bn", passes, fused, passes / fused,
                bound, std::max(ep.z, ef.z), std::max(ep.sum, ef.sum), std::max(ep.sq, ef.sq), gemm,
                good ? "" : "  WRONG");
    total_passes += passes * sh.count;
    total_fused += fused * sh.count;
    total_bound += bound * sh.count;
    free_layer(l);
  }
  std::printf(
      "MobileNetV2's 34 layers: three passes %.1f us, fused %.1f us (%.2fx), bound %.1f us\n",
      total_passes, total_fused, total_passes / total_fused, total_bound);
  check(cublasDestroy(blas), "cublasDestroy");
  check(cudaFree(blas_workspace), "free");
  if (!ok) std::printf("fused_pointwise_probe: a result is wrong (the rows marked WRONG)\n");
  return ok ? 0 : 1;
}
