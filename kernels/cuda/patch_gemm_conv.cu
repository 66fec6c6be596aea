// Few-channel stems as GEMMs over im2col patches a chunk at a time (Note [Few-channel stems as
// patch GEMMs] in patch_gemm_conv.h).
#include <algorithm>
#include <cstdint>

#include "kernels/conv_workspace.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/direct_conv_common.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/patch_gemm_conv.h"

namespace frugal::kernels::cuda {
namespace {

constexpr int kColumnsPerThread = 8;  // one 16-byte store of 16-bit values

// patch[r, m] for the chunk's rows r (output positions first + r) and m < columns: x's value
// that position p reads at column m = (i * kw + j) * c + ch, zero in the padding and past
// kh * kw * c. The values are copied as bits: both 16-bit types go through here.
__global__ void build_patch_kernel(Geom g, int kh, int kw, int columns, int first, int rows,
                                   const uint16_t* __restrict__ x, uint16_t* __restrict__ patch) {
  const int groups = columns / kColumnsPerThread;
  const int real = kh * kw * g.c;
  // 32-bit: a chunk is at most 4 GiB of rows (FRUGAL_PATCH_CHUNK_MIB), 2^28 16-byte groups.
  const int total = rows * groups;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    const int r = t / groups, group = t % groups;
    const int p = first + r;
    const int per_image = g.oh * g.ow;
    const int n = p / per_image, rest = p % per_image;
    const int oh = rest / g.ow, ow = rest % g.ow;
    // Column m0 = group * 8 is tap (i, j), channel ch; the next columns step through the
    // channels, then the taps of the row, then the rows: counting up keeps the three integer
    // divisions a column would take out of the loop.
    const int m0 = group * kColumnsPerThread;
    int tap = m0 / g.c, ch = m0 - tap * g.c;
    int i = tap / kw, j = tap - i * kw;
    const int ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
    const uint16_t* image = x + int64_t{n} * g.h * g.w * g.c;
    uint16_t v[kColumnsPerThread];
#pragma unroll
    for (int u = 0; u < kColumnsPerThread; ++u) {
      v[u] = 0;
      if (m0 + u < real) {
        const int ih = ih0 + i * g.dh, iw = iw0 + j * g.dw;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) v[u] = image[(ih * g.w + iw) * g.c + ch];
      }
      if (++ch == g.c) {
        ch = 0;
        if (++j == kw) {
          j = 0;
          ++i;
        }
      }
    }
    uint4 packed;
    packed.x = v[0] | (uint32_t{v[1]} << 16);
    packed.y = v[2] | (uint32_t{v[3]} << 16);
    packed.z = v[4] | (uint32_t{v[5]} << 16);
    packed.w = v[6] | (uint32_t{v[7]} << 16);
    reinterpret_cast<uint4*>(patch)[t] = packed;  // row r, group `group`
  }
}

// The chunks of the patch, in order: fn(first position, rows, patch) after each is built.
template <typename Fn>
void for_each_chunk(const Context& ctx, cudaStream_t stream, DType dtype, const Conv2dShape& s,
                    const void* x, void* patch, Fn fn) {
  const Geom g = geom_of(s);
  const auto columns = static_cast<int>(patch_gemm_columns(s));
  const int64_t positions = s.n * s.oh() * s.ow();
  const int64_t chunk = patch_gemm_chunk_positions(dtype, s);
  for (int64_t first = 0; first < positions; first += chunk) {
    const auto rows = static_cast<int>(std::min(chunk, positions - first));
    build_patch_kernel<<<grid_for(ctx, int64_t{rows} * columns / kColumnsPerThread), kThreads, 0,
                         stream>>>(g, static_cast<int>(s.kh), static_cast<int>(s.kw), columns,
                                   static_cast<int>(first), rows, static_cast<const uint16_t*>(x),
                                   static_cast<uint16_t*>(patch));
    FRUGAL_LAUNCH_CHECK();
    fn(first, rows, patch);
  }
}

// dw[k, m] = the sum over the slices of sums[slice, k, m], for m < real, added in slice order (so
// the result depends on the shape alone), in dw's type; the sums' rows are `columns` long.
template <typename T>
__global__ void add_slices_kernel(int k, int real, int columns, int slices,
                                  const float* __restrict__ sums, T* __restrict__ dw) {
  const int total = k * real;
  const int64_t block = int64_t{k} * columns;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    const int row = t / real;
    const float* at = sums + row * columns + (t - row * real);
    float sum = 0;
    for (int i = 0; i < slices; ++i) sum += at[i * block];
    dw[t] = from_f<T>(sum);
  }
}

// sums[i] (+)= dy[rows of slice i]^T patch[rows of slice i] for `count` slices of `rows` rows,
// one strided batched cuBLAS call; [k, columns] row-major results, f32 sums of 16-bit products.
void slice_gemms(const Context& ctx, DType dtype, const Conv2dShape& s, int64_t columns,
                 int64_t rows, int64_t count, const void* dy, const void* patch, float beta,
                 float* sums) {
  const cudaDataType_t type = dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f;
  // Column-major, as kernels/cuda/matmul.cu's gemm: sums' block read as [columns, k] is
  // patch^T [columns, rows] times dy [rows, k].
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_handle(ctx), CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(columns),
      static_cast<int>(s.k), static_cast<int>(rows), &alpha, patch, type, static_cast<int>(columns),
      rows * columns, dy, type, static_cast<int>(s.k), rows * s.k, &beta, sums, CUDA_R_32F,
      static_cast<int>(columns), s.k * columns, static_cast<int>(count), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

// The patch chunk at the workspace's start, then the weights' part at a 256-byte boundary: the
// layout cuda_conv_workspace_bytes() counts.
void* after_patch(DType dtype, const Conv2dShape& s, void* base) {
  const size_t patch =
      static_cast<size_t>(patch_gemm_chunk_positions(dtype, s) * patch_gemm_columns(s)) *
      dtype_size(dtype);
  return static_cast<char*>(base) + (patch + 255) / 256 * 256;
}

void check_dtype(DType dtype, const Conv2dShape& s, const char* op) {
  FRUGAL_CHECK(patch_gemm_handles(dtype, s), op, ": no patch GEMM for ", s.str(), " in ", dtype);
}

}  // namespace

void patch_gemm_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                        const void* w, void* y) {
  const char* op = "conv2d_forward (patch GEMM)";
  check_dtype(dtype, s, op);
  cudaStream_t stream = stream_of(ctx, op);
  const size_t esize = dtype_size(dtype);
  const int64_t columns = patch_gemm_columns(s), real = s.kh * s.kw * s.c;
  memory::DataPtr ws = ctx.workspace(cuda_conv_workspace_bytes(ConvPass::forward, dtype, s),
                                     memory::Category::conv_workspace);
  // The weights [k, real] as rows of `columns`, zero past `real`.
  void* padded = after_patch(dtype, s, ws.get());
  CUDA_CHECK(cudaMemsetAsync(padded, 0, static_cast<size_t>(s.k * columns) * esize, stream));
  CUDA_CHECK(cudaMemcpy2DAsync(padded, static_cast<size_t>(columns) * esize, w,
                               static_cast<size_t>(real) * esize, static_cast<size_t>(real) * esize,
                               static_cast<size_t>(s.k), cudaMemcpyDeviceToDevice, stream));
  for_each_chunk(ctx, stream, dtype, s, x, ws.get(), [&](int64_t first, int rows, void* patch) {
    // y[first + r, k] = patch[r, :] . padded[k, :]
    gemm_tf32(ctx, dtype, false, true, rows, s.k, columns, patch, padded, 0.0,
              static_cast<char*>(y) + static_cast<size_t>(first * s.k) * esize, false);
  });
}

void patch_gemm_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                                const Conv2dShape& s, const void* x, const void* dy, void* dw) {
  const char* op = "conv2d_backward_weight (patch GEMM)";
  check_dtype(dtype, s, op);
  FRUGAL_CHECK(dw_dtype == dtype || dw_dtype == DType::f32, op, ": ", dtype, " inputs give dw in ",
               dtype, " or f32, not ", dw_dtype);
  cudaStream_t stream = stream_of(ctx, op);
  const size_t esize = dtype_size(dtype);
  const int64_t columns = patch_gemm_columns(s), real = s.kh * s.kw * s.c;
  memory::DataPtr ws = ctx.workspace(cuda_conv_workspace_bytes(ConvPass::backward_weight, dtype, s),
                                     memory::Category::conv_workspace);
  // [slices, k, columns]: every slice of the first (full) chunk writes its block, later chunks
  // add to theirs (a last, shorter chunk leaves the blocks past its slices as they are).
  auto sums = static_cast<float*>(after_patch(dtype, s, ws.get()));
  const int64_t slices = patch_gemm_slices(dtype, s);
  for_each_chunk(ctx, stream, dtype, s, x, ws.get(), [&](int64_t first, int rows, void* patch) {
    const float beta = first == 0 ? 0.0f : 1.0f;
    const auto* chunk_dy = static_cast<const char*>(dy) + static_cast<size_t>(first * s.k) * esize;
    const int64_t whole = rows / kPatchSlicePositions, rest = rows % kPatchSlicePositions;
    if (whole > 0) {
      slice_gemms(ctx, dtype, s, columns, kPatchSlicePositions, whole, chunk_dy, patch, beta, sums);
    }
    if (rest > 0) {  // the batch's last rows: one slice of its own
      const int64_t done = whole * kPatchSlicePositions;
      slice_gemms(ctx, dtype, s, columns, rest, 1,
                  chunk_dy + static_cast<size_t>(done * s.k) * esize,
                  static_cast<const char*>(patch) + static_cast<size_t>(done * columns) * esize,
                  beta, sums + whole * s.k * columns);
    }
  });
  const auto total = static_cast<int>(s.k * real);  // patch_gemm_handles: k * columns fits
  FRUGAL_CUDA_FLOAT_SWITCH(dw_dtype, op, {
    add_slices_kernel<T><<<grid_for(ctx, total), kThreads, 0, stream>>>(
        static_cast<int>(s.k), static_cast<int>(real), static_cast<int>(columns),
        static_cast<int>(slices), sums, static_cast<T*>(dw));
    FRUGAL_LAUNCH_CHECK();
  });
}

}  // namespace frugal::kernels::cuda
