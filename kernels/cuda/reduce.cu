// CUDA reductions: sum_to (any set of reduced dimensions, split across blocks with float
// partials and a deterministic double-precision finish, Note [Split sums]; [outer, red, inner] sums
// over red take a packed kernel, Note [Middle sums]) and row-wise argmax.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/split_sums.cuh"
#include "kernels/reduce.h"

namespace frugal::kernels::cuda {
namespace {

// x viewed as kept dims (out's order) and reduced dims, size-1 dims dropped and neighbours of
// the same kind merged. Offsets into x come from mixed-radix decomposition.
struct ReducePlan {
  int nk = 0, nr = 0;
  int64_t k_dims[kMaxDims] = {}, k_strides[kMaxDims] = {};
  int64_t r_dims[kMaxDims] = {}, r_strides[kMaxDims] = {};
  int64_t out = 1, red = 1;
};

ReducePlan make_plan(const Reduction& r, bool* inner_reduced) {
  ReducePlan p;
  int64_t stride = 1;
  int last_kind = -1;  // 0 kept, 1 reduced, for the dim just inside the current one
  *inner_reduced = false;
  bool first = true;
  for (int d = r.ndim - 1; d >= 0; --d) {
    int64_t size = r.in_dims[d];
    if (size == 1) continue;
    int kind = r.out_dims[d] == 1 ? 1 : 0;
    if (first) *inner_reduced = kind == 1;
    first = false;
    int64_t* dims = kind ? p.r_dims : p.k_dims;
    int64_t* strides = kind ? p.r_strides : p.k_strides;
    int& n = kind ? p.nr : p.nk;
    if (kind == last_kind) {
      dims[n - 1] *= size;  // merge with the inner neighbour: same stride base
    } else {
      dims[n] = size;
      strides[n] = stride;
      ++n;
    }
    last_kind = kind;
    stride *= size;
  }
  // Built innermost first; the kernels decompose innermost first as well.
  for (int i = 0; i < p.nk; ++i) p.out *= p.k_dims[i];
  for (int i = 0; i < p.nr; ++i) p.red *= p.r_dims[i];
  return p;
}

// Offset of linear index idx over dims (innermost first) with the given strides.
__device__ __forceinline__ int64_t offset_of(int64_t idx, int n, const int64_t* dims,
                                             const int64_t* strides) {
  int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    int64_t q = idx / dims[i];
    off += (idx - q * dims[i]) * strides[i];
    idx = q;
  }
  return off;
}

// Innermost dim kept: threadIdx.x walks 32 neighbouring outputs (coalesced), threadIdx.y and
// blockIdx.y split the reduction. Writes y directly when there is one split, else partials.
template <typename T>
__global__ void reduce_columns_kernel(ReducePlan p, const T* x, double scale, T* y,
                                      float* partial) {
  __shared__ float sums[8][33];
  int64_t o = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (o < p.out) {
    int64_t base = offset_of(o, p.nk, p.k_dims, p.k_strides);
    int64_t step = static_cast<int64_t>(gridDim.y) * 8;
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < p.red; r += step) {
      acc += to_f(x[base + offset_of(r, p.nr, p.r_dims, p.r_strides)]);
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < p.out) {
    float s = 0.0f;
    for (int i = 0; i < 8; ++i) s += sums[i][threadIdx.x];
    if (gridDim.y == 1) {
      y[o] = from_f<T>(static_cast<float>(scale * s));
    } else {
      partial[static_cast<int64_t>(blockIdx.y) * p.out + o] = s;
    }
  }
}

// Innermost dim reduced: one warp per output, lanes walk neighbouring elements (coalesced).
template <typename T>
__global__ void reduce_rows_kernel(ReducePlan p, const T* x, double scale, T* y, float* partial) {
  int64_t o = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.y;
  if (o >= p.out) return;
  int64_t base = offset_of(o, p.nk, p.k_dims, p.k_strides);
  int64_t step = static_cast<int64_t>(gridDim.y) * 32;
  float acc = 0.0f;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * 32 + threadIdx.x; r < p.red; r += step) {
    acc += to_f(x[base + offset_of(r, p.nr, p.r_dims, p.r_strides)]);
  }
  acc = warp_sum(acc);
  if (threadIdx.x == 0) {
    if (gridDim.y == 1) {
      y[o] = from_f<T>(static_cast<float>(scale * acc));
    } else {
      partial[static_cast<int64_t>(blockIdx.y) * p.out + o] = acc;
    }
  }
}

// Note [Middle sums]: x laid out as [outer, red, inner] summed over red (a global average pool,
// the gradient of a squeeze-excitation scale, any NHWC tensor summed over H and W) is the
// reduction an NHWC CNN does most. One block takes `lanes` 16-byte packs of the innermost
// dimension for one outer index and walks the reduced rows with kThreads / lanes rows of
// threads, so a warp reads consecutive bytes and no thread divides; the rows' sums meet through
// sum_block_rows (Note [Block row sums]) and, when red is split over blocks as well, through the
// same fixed-order finish as the other reductions. The general column kernel's per-element
// 64-bit offset decomposition and 2-byte loads made EfficientNet-B0's H x W sums 1.8 ms and its
// global average pools (one thread per output, walking all of H x W) 2.2 ms of a 43 ms f16 step
// (H200, batch 128 at 224x224).
struct MiddleSum {
  int64_t outer = 1, red = 1, inner = 1;
};

// x as [outer, red, inner] with red summed, when the plan reads so (innermost dim kept).
bool middle_sum_of(const ReducePlan& p, MiddleSum* m) {
  if (p.nr != 1 || p.nk < 1 || p.nk > 2 || p.k_strides[0] != 1) return false;
  m->inner = p.k_dims[0];
  m->red = p.r_dims[0];
  m->outer = p.nk == 2 ? p.k_dims[1] : 1;
  if (p.r_strides[0] != m->inner) return false;
  if (p.nk == 2 && p.k_strides[1] != m->inner * m->red) return false;
  // Rows are counted in int, and a grid-stride step past the last must not overflow.
  return m->outer <= 65535 && m->inner <= INT32_MAX && m->red <= INT32_MAX / 2;
}

// Grid (pack blocks, outer, splits) of kThreads threads: lanes packs x rows (Note [Middle sums]).
template <typename T, int V>
__global__ void sum_middle_kernel(MiddleSum m, int lanes, const T* __restrict__ x, double scale,
                                  T* __restrict__ y, float* __restrict__ partial) {
  const int packs = static_cast<int>(m.inner / V), rows = kThreads / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const int r = static_cast<int>(threadIdx.x) / lanes;
  const int pack = static_cast<int>(blockIdx.x) * lanes + lane;
  const int64_t o = blockIdx.y;
  float acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = 0.0f;
  if (r < rows && pack < packs) {
    const T* column = x + o * m.red * m.inner + static_cast<int64_t>(pack) * V;
    const int step = static_cast<int>(gridDim.z) * rows;
    for (int i = static_cast<int>(blockIdx.z) * rows + r; i < m.red; i += step) {
      Pack<T, V> pk = load_pack<T, V>(column + static_cast<int64_t>(i) * m.inner);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] += to_f(pk.v[v]);
    }
  }
  sum_block_rows(acc, lanes, rows, [&](int l, int v, float sum) {
    const int col = static_cast<int>(blockIdx.x) * lanes + l;
    if (col >= packs) return;
    const int64_t out = o * m.inner + static_cast<int64_t>(col) * V + v;
    if (gridDim.z == 1) {
      y[out] = from_f<T>(static_cast<float>(scale * sum));
    } else {
      partial[static_cast<int64_t>(blockIdx.z) * m.outer * m.inner + out] = sum;
    }
  });
}

// out[row] = first index of the row's maximum; one warp per row.
template <typename T>
__global__ void argmax_rows_kernel(int64_t rows, int64_t cols, const T* x, int64_t* out) {
  int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  float best = -INFINITY;
  int64_t idx = -1;
  for (int64_t j = threadIdx.x; j < cols; j += 32) {
    float v = to_f(xr[j]);
    if (idx < 0 || v > best) {
      best = v;
      idx = j;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float ob = __shfl_xor_sync(0xffffffffu, best, o);
    int64_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    bool take = oi >= 0 && (idx < 0 || ob > best || (ob == best && oi < idx));
    if (take) {
      best = ob;
      idx = oi;
    }
  }
  if (threadIdx.x == 0) out[row] = idx < 0 ? 0 : idx;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T, int V>
void launch_sum_middle(const Context& ctx, cudaStream_t s, const MiddleSum& m, const void* x,
                       double scale, void* y) {
  const int64_t packs = m.inner / V;
  const int lanes = static_cast<int>(std::min<int64_t>(packs, 32));
  const int rows = kThreads / lanes;
  const int64_t blocks = ceil_div(packs, lanes) * m.outer;
  // About four blocks a multiprocessor; each thread still sums at least 8 rows.
  const int64_t target = int64_t{sm_count(ctx.device.index)} * 4;
  const int64_t splits =
      std::min<int64_t>({std::max<int64_t>(1, target / blocks),
                         std::max<int64_t>(1, ceil_div(m.red, rows * 8)), 65535});
  memory::DataPtr ws;
  float* partial = nullptr;
  if (splits > 1) {
    ws = ctx.workspace(static_cast<size_t>(splits * m.outer * m.inner) * sizeof(float));
    partial = static_cast<float*>(ws.get());
  }
  dim3 grid(static_cast<unsigned>(ceil_div(packs, lanes)), static_cast<unsigned>(m.outer),
            static_cast<unsigned>(splits));
  sum_middle_kernel<T, V><<<grid, kThreads, 0, s>>>(m, lanes, static_cast<const T*>(x), scale,
                                                    static_cast<T*>(y), partial);
  FRUGAL_LAUNCH_CHECK();
  if (splits > 1) {
    sum_splits<double>(ctx, s, m.outer * m.inner, static_cast<int>(splits), partial, scale,
                       static_cast<T*>(y));
  }
}

}  // namespace

void sum_to(const Context& ctx, DType dtype, const Reduction& r, const void* x, double scale,
            void* y) {
  cudaStream_t s = stream_of(ctx, "sum_to");
  FRUGAL_CHECK(r.ndim <= kMaxDims, "sum_to: rank ", r.ndim, " exceeds ", kMaxDims);
  if (r.out_numel == 0) return;
  DeviceGuard guard(ctx.device);
  bool inner_reduced = false;
  ReducePlan p = make_plan(r, &inner_reduced);
  MiddleSum middle;
  if (!inner_reduced && middle_sum_of(p, &middle)) {
    FRUGAL_CUDA_FLOAT_SWITCH(dtype, "sum_to", {
      if (middle.inner % kVec<T> == 0 && aligned16(x)) {
        launch_sum_middle<T, kVec<T>>(ctx, s, middle, x, scale, y);
      } else {
        launch_sum_middle<T, 1>(ctx, s, middle, x, scale, y);
      }
    });
    return;
  }
  // Enough blocks to fill the device a few times; each thread still sums >= 32 elements.
  int64_t target = int64_t{sm_count(ctx.device.index)} * 4;
  int64_t blocks_x = inner_reduced ? ceil_div(p.out, 8) : ceil_div(p.out, 32);
  int64_t per_split = inner_reduced ? 32 * 32 : 8 * 32;
  int64_t splits = std::min<int64_t>({std::max<int64_t>(1, target / blocks_x),
                                      std::max<int64_t>(1, ceil_div(p.red, per_split)), 65535});
  FRUGAL_CHECK(blocks_x <= INT32_MAX, "sum_to: ", r.out_numel, " outputs are too many");
  memory::DataPtr ws;
  float* partial = nullptr;
  if (splits > 1) {
    ws = ctx.workspace(static_cast<size_t>(splits * p.out) * sizeof(float));
    partial = static_cast<float*>(ws.get());
  }
  dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "sum_to", {
    auto xt = static_cast<const T*>(x);
    auto yt = static_cast<T*>(y);
    if (inner_reduced) {
      reduce_rows_kernel<T><<<grid, dim3(32, 8), 0, s>>>(p, xt, scale, yt, partial);
    } else {
      reduce_columns_kernel<T><<<grid, dim3(32, 8), 0, s>>>(p, xt, scale, yt, partial);
    }
    FRUGAL_LAUNCH_CHECK();
    if (splits > 1) {
      sum_splits<double>(ctx, s, p.out, static_cast<int>(splits), partial, scale, yt);
    }
  });
}

void argmax_rows(const Context& ctx, DType dtype, int64_t rows, int64_t cols, const void* x,
                 int64_t* out) {
  cudaStream_t s = stream_of(ctx, "argmax_rows");
  FRUGAL_CHECK(cols > 0 || rows == 0, "argmax_rows: ", rows, " rows of 0 columns");
  if (rows == 0) return;
  DeviceGuard guard(ctx.device);
  FRUGAL_CHECK(ceil_div(rows, 8) <= INT32_MAX, "argmax_rows: too many rows (", rows, ")");
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, "argmax_rows", {
    argmax_rows_kernel<T><<<static_cast<unsigned>(ceil_div(rows, 8)), dim3(32, 8), 0, s>>>(
        rows, cols, static_cast<const T*>(x), out);
    FRUGAL_LAUNCH_CHECK();
  });
}

}  // namespace frugal::kernels::cuda
