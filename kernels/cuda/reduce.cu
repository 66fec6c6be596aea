// CUDA reductions: sum_to (any set of reduced dimensions, split across blocks with float
// partials and a deterministic double-precision finish) and row-wise argmax.
#include "kernels/cuda/cuda_common.cuh"
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
__global__ void reduce_rows_kernel(ReducePlan p, const T* x, double scale, T* y,
                                   float* partial) {
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

// y[o] = scale * sum over splits of partial[g, o], in a fixed order (deterministic).
template <typename T>
__global__ void reduce_finish_kernel(int64_t out, int splits, const float* partial,
                                     double scale, T* y) {
  for (int64_t o = thread_index(); o < out; o += grid_stride()) {
    double s = 0.0;
    for (int g = 0; g < splits; ++g) s += partial[static_cast<int64_t>(g) * out + o];
    y[o] = from_f<T>(static_cast<float>(scale * s));
  }
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

}  // namespace

void sum_to(const Context& ctx, DType dtype, const Reduction& r, const void* x, double scale,
            void* y) {
  cudaStream_t s = stream_of(ctx, "sum_to");
  FRUGAL_CHECK(r.ndim <= kMaxDims, "sum_to: rank ", r.ndim, " exceeds ", kMaxDims);
  if (r.out_numel == 0) return;
  DeviceGuard guard(ctx.device);
  bool inner_reduced = false;
  ReducePlan p = make_plan(r, &inner_reduced);
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
      reduce_finish_kernel<T><<<grid_for(ctx, p.out), kThreads, 0, s>>>(
          p.out, static_cast<int>(splits), partial, scale, yt);
      FRUGAL_LAUNCH_CHECK();
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
