// Shared pieces of the CUDA kernels: the one dtype switch (f32, f16, bf16 storage; f64 is
// CPU-only), float conversions (compute is always float), 16-byte packs and launch sizing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"

namespace frugal::kernels::cuda {

// Runs `body` with T bound to the CUDA storage type of `dtype`; f64 and non-floating dtypes throw
// naming `op`.
#define FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, ...)                               \
  switch (dtype) {                                                             \
    case ::frugal::DType::f32: {                                               \
      using T = float;                                                         \
      __VA_ARGS__;                                                             \
      break;                                                                   \
    }                                                                          \
    case ::frugal::DType::f16: {                                               \
      using T = __half;                                                        \
      __VA_ARGS__;                                                             \
      break;                                                                   \
    }                                                                          \
    case ::frugal::DType::bf16: {                                              \
      using T = __nv_bfloat16;                                                 \
      __VA_ARGS__;                                                             \
      break;                                                                   \
    }                                                                          \
    case ::frugal::DType::f64:                                                 \
      FRUGAL_FAIL(op, ": f64 is CPU-only (CUDA kernels take f32, f16, bf16)"); \
    default:                                                                   \
      FRUGAL_FAIL(op, ": dtype ", dtype, " is not a floating type");           \
  }

// Parameters, statistics, losses and optimizer state are f32 on CUDA; f64 is CPU-only.
inline void check_f32(DType dtype, const char* what, const char* op) {
  FRUGAL_CHECK(dtype != DType::f64, op, ": f64 is CPU-only (", what, " are f32 on CUDA)");
  FRUGAL_CHECK(dtype == DType::f32, op, ": ", what, " must be f32, got ", dtype);
}

template <typename T>
__device__ __forceinline__ float to_f(T v);
template <>
__device__ __forceinline__ float to_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// N elements loaded or stored as one aligned access (16 bytes when N = 16 / sizeof(T)).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <typename T>
constexpr int kVec = static_cast<int>(16 / sizeof(T));

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}

template <typename T>
constexpr bool is_16bit = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The packed pair of a 16-bit T: __half2 or __nv_bfloat162.
template <typename T>
using PairOf = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;

// a and b rounded to a 16-bit T (to nearest even) in one conversion instruction of an f32 pair
// (cvt.rn.f16x2.f32), with the results of two scalar ones.
template <typename T>
__device__ __forceinline__ PairOf<T> round_pair(float a, float b) {
  if constexpr (std::is_same_v<T, __half>) {
    return __floats2half2_rn(a, b);
  } else {
    return __floats2bfloat162_rn(a, b);
  }
}

// A pair of a 16-bit T back to floats, exactly.
template <typename T>
__device__ __forceinline__ float2 widen_pair(PairOf<T> p) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half22float2(p);
  } else {
    return __bfloat1622float2(p);
  }
}

// N floats rounded to T (to nearest even), a pair at a time for the 16-bit types (round_pair).
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> round_pack(const float* v) {
  Pack<T, N> out;
  if constexpr (N % 2 == 0 && is_16bit<T>) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const PairOf<T> h = round_pair<T>(v[i], v[i + 1]);
      if constexpr (std::is_same_v<T, __half>) {
        out.v[i] = __low2half(h);
        out.v[i + 1] = __high2half(h);
      } else {
        out.v[i] = __low2bfloat16(h);
        out.v[i + 1] = __high2bfloat16(h);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out.v[i] = from_f<T>(v[i]);
  }
  return out;
}

// Rounds N floats to T and stores them as one aligned access.
template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const float* v) {
  *reinterpret_cast<Pack<T, N>*>(p) = round_pack<T, N>(v);
}

// Channels per thread for NHWC kernels that load 16-byte packs along C: kVec<T> when `channels`
// divide into packs and every non-null pointer is 16-byte aligned, else 1.
template <typename T>
int pack_width(int64_t channels, std::initializer_list<const void*> pointers) {
  if (channels % kVec<T> != 0) return 1;
  for (const void* p : pointers) {
    if (p != nullptr && !aligned16(p)) return 1;
  }
  return kVec<T>;
}

// Runs `launch(std::integral_constant<int, V>{})` with V = pack_width<T>(channels, pointers).
template <typename T, typename Launch>
void with_pack_width(int64_t channels, std::initializer_list<const void*> pointers, Launch launch) {
  if (pack_width<T>(channels, pointers) == kVec<T>) {
    launch(std::integral_constant<int, kVec<T>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// Whether a grid-stride loop over `count` items may index in int32: within half its range, so
// that a stride past the end does not overflow.
inline bool fits_int32_grid(int64_t count) {
  return count <= std::numeric_limits<int32_t>::max() / 2;
}

// Runs `launch(I{})` with I = int32_t where fits_int32_grid(count), else int64_t.
template <typename Launch>
void with_index_type(int64_t count, Launch launch) {
  if (fits_int32_grid(count)) {
    launch(int32_t{});
  } else {
    launch(int64_t{});
  }
}

constexpr int kThreads = 256;

// Blocks for `work` items of one thread each, capped for grid-stride loops (enough to fill the
// device several times over; more blocks only add scheduling).
inline unsigned grid_for(const Context& ctx, int64_t work, int threads = kThreads) {
  int64_t blocks = (work + threads - 1) / threads;
  int64_t cap = int64_t{sm_count(ctx.device.index)} * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, cap)));
}

// Note [Grids by occupancy]
// A grid-stride kernel does all its work in one wave when its grid is exactly the blocks the
// device holds at once; a grid sized for more runs a partial last wave. The batch norm passes were
// sized for 2048 / 256 = 8 resident blocks a multiprocessor (their partial sums for 4) while the
// backward passes' 72-88 registers a thread let 2 or 3 fit: the backward sums ran 1.33 waves, the
// last a third full, and moved 2.1 TB/s on MobileNetV1's largest layer where the forward sums
// moved 3.4 (H200, bf16). The depthwise weight gradient's 74 registers likewise fit 3 of the 4
// blocks its splits assumed. Such grids now come from the kernel's own occupancy.

// Blocks of `kernel` at `threads` a block that the whole device holds at once.
template <typename Kernel>
int64_t resident_fill(const Context& ctx, Kernel* kernel, int threads) {
  return int64_t{sm_count(ctx.device.index)} *
         resident_blocks(ctx.device.index, reinterpret_cast<const void*>(kernel), threads);
}

// grid_for for a grid-stride `kernel`: at most one wave (Note [Grids by occupancy]).
template <typename Kernel>
unsigned resident_grid(const Context& ctx, Kernel* kernel, int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min(blocks, resident_fill(ctx, kernel, threads))));
}

// Note [Multi-tensor lists]
// The *_many entries (unscale_and_check_many, lower_many, sgd_step_many) launch once per list of
// up to kListMax tensors, the list passed by value in the kernel's parameters (a struct of
// kListMax-long pointer arrays, the sizes `n` and the block table `blocks`). Where the host bounds
// a step, one launch for 32 tensors instead of 32 launches is the point. The blocks of the 1-D
// grid are shared out in proportion to the tensors' sizes, at least one each: giving every tensor
// the same number (grid.y = tensor) left ResNet-18's 2.4M-element weights 16 blocks each while the
// blocks of its BN vectors idled, and its SGD step took 0.52 ms for 47 MB (H200).
constexpr int kListMax = 32;

struct ListBlocks {
  int first[kListMax + 1];  // tensor t owns blocks [first[t], first[t + 1])
};

// In a list kernel: this block's tensor, and a grid-stride loop over that tensor's blocks
// (for (i = begin; i < n[t]; i += stride)).
struct ListSlice {
  int t;
  int64_t begin, stride;
};

__device__ __forceinline__ ListSlice list_slice(const ListBlocks& blocks) {
  const int b = static_cast<int>(blockIdx.x);
  int t = 0;
  while (b >= blocks.first[t + 1]) ++t;
  const int owned = blocks.first[t + 1] - blocks.first[t];
  return {t, static_cast<int64_t>(b - blocks.first[t]) * blockDim.x + threadIdx.x,
          static_cast<int64_t>(owned) * blockDim.x};
}

// Fills lists from tensors [0, count) of `sizes`, skipping empty ones: fill(list, slot, t) puts
// tensor t's pointers in slot `slot` (list.n and list.blocks are set here); launch(list, blocks)
// launches a full list on a 1-D grid of `blocks` blocks, about eight a multiprocessor.
template <typename List, typename Fill, typename Launch>
void for_each_tensor_list(const Context& ctx, const char* op, int64_t count, const int64_t* sizes,
                          Fill fill, Launch launch) {
  FRUGAL_CHECK(count >= 0, op, ": negative count ", count);
  const int64_t target = int64_t{sm_count(ctx.device.index)} * 8;
  for (int64_t first = 0; first < count;) {
    List list{};
    int used = 0;
    int64_t total = 0;
    for (; first < count && used < kListMax; ++first) {
      FRUGAL_CHECK(sizes[first] >= 0, op, ": tensor ", first, " has negative size ", sizes[first]);
      if (sizes[first] == 0) continue;
      fill(list, used, first);
      list.n[used] = sizes[first];
      total += sizes[first];
      ++used;
    }
    if (used == 0) continue;
    list.blocks.first[0] = 0;
    for (int t = 0; t < used; ++t) {
      const int64_t share = (list.n[t] * target + total - 1) / total;  // its part of the target
      const int64_t full = (list.n[t] + kThreads - 1) / kThreads;      // one element a thread
      list.blocks.first[t + 1] =
          list.blocks.first[t] + static_cast<int>(std::max<int64_t>(1, std::min(share, full)));
    }
    for (int t = used; t < kListMax; ++t) list.blocks.first[t + 1] = list.blocks.first[used];
    launch(list, static_cast<unsigned>(list.blocks.first[used]));
    FRUGAL_LAUNCH_CHECK();
  }
}

// Global thread index and stride of a 1-D grid-stride loop, in 64 bits.
__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Warp-wide sum and max (all lanes get the result).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Note [Block row sums]: kernels that split a reduction over a block lay it out as `lanes`
// columns x `rows` rows (thread r * lanes + lane, r < rows) with M running sums per thread, and
// need, per lane and per m, the sum over the rows. sum_block_rows stages 16 of the M values at a
// time in shared memory and sums each (m, lane) column with several threads over consecutive
// row ranges, then adds those ranges in order, so the order of additions depends only on the
// launch shape (deterministic). The former per-value loop (two __syncthreads and one thread
// walking every row, M times) cost more than the loads themselves with few channels and 16-bit
// packs: 72 values x 64 rows for a 32-channel f16 depthwise weight gradient.
// Calls write(lane, m, sum) exactly once for every lane < lanes and m < M; every thread of the
// block must call it (it synchronises), and the block must have exactly kThreads threads: its
// loops stride by kThreads, so a smaller block leaves sums unwritten (a 240-thread block lost
// columns 240-255 that way).
template <int M, typename Write>
__device__ __forceinline__ void sum_block_rows(const float (&vals)[M], int lanes, int rows,
                                               Write write) {
  constexpr int kChunk = 16;
  __shared__ float staged[kChunk][kThreads + 1];  // +1: columns of different m in other banks
  __shared__ float ranges[kThreads];
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int m0 = 0; m0 < M; m0 += kChunk) {
    const int count = M - m0 < kChunk ? M - m0 : kChunk;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (m0 + k < M) staged[k][t] = vals[m0 + k];
    }
    __syncthreads();
    const int outputs = count * lanes;
    if (outputs >= kThreads / 2) {  // one thread per column
      for (int o = t; o < outputs; o += kThreads) {
        const int k = o / lanes, lane = o % lanes;
        float sum = 0.0f;
        for (int r = 0; r < rows; ++r) sum += staged[k][r * lanes + lane];
        write(lane, m0 + k, sum);
      }
    } else {  // `split` threads per column, each over `len` consecutive rows
      const int split = kThreads / outputs;
      const int len = (rows + split - 1) / split;
      if (t < split * outputs) {
        const int o = t % outputs, part = t / outputs;
        const int k = o / lanes, lane = o % lanes;
        const int end = min(rows, (part + 1) * len);
        float sum = 0.0f;
        for (int r = part * len; r < end; ++r) sum += staged[k][r * lanes + lane];
        ranges[t] = sum;
      }
      __syncthreads();
      if (t < outputs) {
        float sum = 0.0f;
        for (int part = 0; part < split; ++part) sum += ranges[part * outputs + t];
        write(t % lanes, m0 + t / lanes, sum);
      }
    }
    __syncthreads();
  }
}

}  // namespace frugal::kernels::cuda
