// What the depthwise NHWC kernels share (Note [Depthwise kernels] in depthwise_conv.h): the pack
// and strip sizes, the strips' column maps, the loads that make batch norm's input over on the
// way in (In), the gather of one strip, and the weights transposed for the strips.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/depthwise_conv.h"
#include "kernels/cuda/direct_conv_common.cuh"

namespace frugal::kernels::cuda {
namespace {

// Pixels a strip: 8 divides the 112- and 56-wide maps of 224x224 models, and the strided input
// gradient needs an even count (GatherCols); 28, 14 and 7 leave one partial strip a row.
constexpr int kStrip = 8;
// Channels a thread: 4 for every dtype and both kernel sizes. The gathers hold 8 x 4 f32
// accumulators and one kernel row of weights (<= 20); with 8 channels the f16 3x3 forward took
// 128 registers, 16 warps a multiprocessor, and ran at 1.3 TB/s against 2.6 for f32's packs of 4
// (one pixel row of 112x112x32, batch 128, H200).
constexpr int kPack = 4;
// Threads of a gather block: small blocks round the register file off finely.
constexpr int kGatherThreads = 128;
// Channel packs side by side in a weight-gradient block (x kernel rows x strips): a block row
// reads 16 packs, 128 or 256 contiguous bytes of a pixel.
constexpr int kWeightLanes = 16;
// Channels a thread of the row windows and of the weight gradient by rows: two keep a window of
// three input rows in registers (Note [Row windows] in depthwise_windows.cuh).
constexpr int kWindowPack = 2;

// Whether packs of V channels fit: C divides into them and every non-null pointer is aligned to
// one pack.
template <typename T, int V>
bool packs_fit(int64_t c, std::initializer_list<const void*> pointers) {
  if (c % V != 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % (V * sizeof(T)) != 0) return false;
  }
  return true;
}

// The strips cover stride 1 and 2 along W without dilation there (their column maps are fixed
// at compile time); rows take any stride and dilation.
inline bool uses_strips(const Conv2dShape& s) {
  return s.dil_w == 1 && (s.stride_w == 1 || s.stride_w == 2);
}

// Column maps of a strip, fixed at compile time so that the strip's accumulators stay in
// registers: source column j of the strip feeds pixel target(j, b) of the strip (or -1: none)
// through tap column b.
//
// ReadCols (forward, weight gradient): output r reads input column j = r*S + b, column 0 being
// input column ow0*S - pw of the strip's first output ow0.
template <int K, int S>
struct ReadCols {
  static constexpr int kK = K;
  static constexpr int kCols = (kStrip - 1) * S + K;
  static constexpr int target(int j, int b) {
    return j >= b && (j - b) % S == 0 && (j - b) / S < kStrip ? (j - b) / S : -1;
  }
};

// GatherCols (input gradient): dx column iw0 + r gathers dy column q0 + j through tap b when
// j*S + b == r + M*S, for strips placed so that iw0 + pw is a multiple of S; then
// q0 = (iw0 + pw) / S - M and every strip has the same tap parities (so S divides kStrip).
template <int K, int S>
struct GatherCols {
  static constexpr int kK = K;
  static constexpr int kM = (K - 1) / S;
  static constexpr int kCols = (kStrip - 1) / S + kM + 1;
  static constexpr int target(int j, int b) {
    return j * S + b - kM * S >= 0 && j * S + b - kM * S < kStrip ? j * S + b - kM * S : -1;
  }
};

// Calls visit(b, t) for each tap column b < Cols::kK through which source column j feeds strip
// pixel t = Cols::target(j, b) >= 0: the loop every strip and window kernel multiplies in,
// unrolled at compile time (j is too, where the callers unroll theirs).
template <class Cols, class Visit>
__device__ __forceinline__ void for_each_target(int j, Visit visit) {
#pragma unroll
  for (int b = 0; b < Cols::kK; ++b) {
    const int t = Cols::target(j, b);
    if (t >= 0) visit(b, t);
  }
}

// for_each_target over every source column j < Cols::kCols, j outer: visit(j, b, t).
template <class Cols, class Visit>
__device__ __forceinline__ void for_each_tap(Visit visit) {
#pragma unroll
  for (int j = 0; j < Cols::kCols; ++j) {
    for_each_target<Cols>(j, [&](int b, int t) { visit(j, b, t); });
  }
}

// Brute force over (j, b): every pixel of the strip is fed, and only columns [0, kCols) feed.
template <class Cols>
constexpr bool cols_consistent() {
  for (int j = -Cols::kK; j < Cols::kCols + Cols::kK; ++j) {
    for (int b = 0; b < Cols::kK; ++b) {
      if ((j < 0 || j >= Cols::kCols) && Cols::target(j, b) >= 0) return false;
    }
  }
  for (int r = 0; r < kStrip; ++r) {
    bool fed = false;
    for (int j = 0; j < Cols::kCols; ++j) {
      for (int b = 0; b < Cols::kK; ++b) fed = fed || Cols::target(j, b) == r;
    }
    if (!fed) return false;
  }
  return true;
}
static_assert(kStrip % 2 == 0, "GatherCols<K, 2> needs an even strip");
static_assert(cols_consistent<ReadCols<3, 1>>() && cols_consistent<ReadCols<3, 2>>() &&
              cols_consistent<ReadCols<5, 1>>() && cols_consistent<ReadCols<5, 2>>());
static_assert(cols_consistent<GatherCols<3, 1>>() && cols_consistent<GatherCols<3, 2>>() &&
              cols_consistent<GatherCols<5, 1>>() && cols_consistent<GatherCols<5, 2>>());

template <typename T, int V>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[V]) {
  const Pack<T, V> pk = load_pack<T, V>(p);
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = to_f(pk.v[v]);
}

// What the forward and the weight gradient make of a loaded pack of x (Note [Batch norm inside the
// depthwise convolution] in kernels/conv.h): PlainInput leaves it; BnActLoad<T, V, A> takes it
// for z and computes x = A((z - mean) * (invstd * gamma) + beta) for the V channels from c0,
// rounded to T, with the expression of batch_norm.cu's normalize kernel, so x equals the
// normalize kernel's bit for bit (but for a zero's sign: Note [Clamps after rounding]). The
// activation is a template argument: a run-time switch between the loads of a strip kept them
// from issuing together (the first form of this ran the weight gradient at 2.4x the time of the
// plain kernel).
struct PlainInput {
  __device__ __forceinline__ PlainInput(const BnActInput&, int) {}
  __host__ __device__ PlainInput() {}
  template <int V>
  __device__ __forceinline__ void operator()(float (&)[V]) const {}
};

// The statistics load as packs of V floats (depthwise_reads_bn_act checks their alignment).
template <typename T, int V, Activation A>
struct BnActLoad {
  float mean[V], scale[V], shift[V];
  __device__ __forceinline__ BnActLoad(const BnActInput& in, int c0) {
    auto f32 = [](const void* p) { return static_cast<const float*>(p); };
    load_floats<float, V>(f32(in.mean) + c0, mean);
    load_floats<float, V>(f32(in.invstd) + c0, scale);
    float gamma[V];
    if (in.gamma != nullptr) load_floats<float, V>(f32(in.gamma) + c0, gamma);
    if (in.beta != nullptr) load_floats<float, V>(f32(in.beta) + c0, shift);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      scale[v] *= in.gamma != nullptr ? gamma[v] : 1.0f;
      shift[v] = in.beta != nullptr ? shift[v] : 0.0f;
    }
  }
  __device__ __forceinline__ void operator()(float (&x)[V]) const {
    // 16-bit relu and relu6 clamp the rounded pairs (Note [Clamps after rounding] in
    // activation.cuh): these loads are ALU bound, and f32 clamps were 8 of a pack's instructions.
    constexpr bool after = clamps_after_rounding<A, T, V>;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float affine = (x[v] - mean[v]) * scale[v] + shift[v];
      x[v] = after ? affine : act_forward<A>(affine);
    }
    if constexpr (after) {
      round_and_clamp<A, T>(x);
    } else {
      const Pack<T, V> rounded = round_pack<T, V>(x);  // as the normalize kernel's store_pack
#pragma unroll
      for (int v = 0; v < V; ++v) x[v] = to_f(rounded.v[v]);
    }
  }
};

// Runs launch(std::type_identity<In>{}) with the In of `bn` (PlainInput when null), each
// activation a kernel of its own: those depthwise_fuses_bn_act admits.
template <typename T, int V, typename Launch>
void with_input(const BnActInput* bn, Launch launch) {
  if (bn == nullptr) return launch(std::type_identity<PlainInput>{});
  switch (bn->act) {
    case Activation::relu:
      return launch(std::type_identity<BnActLoad<T, V, Activation::relu>>{});
    case Activation::relu6:
      return launch(std::type_identity<BnActLoad<T, V, Activation::relu6>>{});
    default:
      FRUGAL_CHECK(false, "depthwise conv: no kernel reads batch norm's input through activation ",
                   static_cast<int>(bn->act));
  }
}

// Column col clamped into a row of w columns: a load there needs no branch (load_column).
__device__ __forceinline__ int clamped_column(int col, int w) { return min(max(col, 0), w - 1); }

// Whether column col lies in [0, end): outside, the convolution's padding reads zero.
__device__ __forceinline__ bool column_inside(int col, int end) {
  return static_cast<unsigned>(col) < static_cast<unsigned>(end);
}

// A pack of V values of column `col` of a row (element offset `row` at the pack's first
// channel), made over by `in`, or zeros when col is outside [0, end) (the convolution's padding
// is zero whatever the input's recipe). The load itself always reads inside the row
// (col clamped to [0, w)), so it needs no branch and the compiler can issue a strip's loads
// together; branching around each column's load held a thread to one column's loads in flight.
template <typename T, int V, class In = PlainInput>
__device__ __forceinline__ void load_column(const T* __restrict__ src, int row, int col, int end,
                                            int w, int c, float (&out)[V], const In& in = In()) {
  const int clamped = clamped_column(col, w);
  load_floats<T, V>(src + row + clamped * c, out);
  in(out);
  const bool inside = column_inside(col, end);
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = inside ? out[v] : 0.0f;
}

// Element offset of row `row` of image n at channel c0 in an [N, h, w, C] tensor, or -1 when the
// row lies outside [0, h) (row is 64-bit: oh * sh - ph + a * dh may pass INT_MAX for huge pads).
__device__ __forceinline__ int row_offset(int64_t row, int n, int h, int w, int c, int c0) {
  return row >= 0 && row < h ? ((n * h + static_cast<int>(row)) * w) * c + c0 : -1;
}

// Calls visit(j, xv) for the columns j < kCols of a strip's row: xv the pack of column col0 + j
// made over by `in` (load_column), straight from one row pointer where the strip lies inside the
// row (Note [Interior strips]).
template <typename T, int V, int kCols, class In, class Visit>
__device__ __forceinline__ void for_each_column(const T* __restrict__ src, int row, int col0,
                                                int col_end, int width, int c, bool interior,
                                                const In& in, Visit visit) {
  if (interior) {
    const T* line = src + row + col0 * c;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      float xv[V];
      load_floats<T, V>(line + j * c, xv);
      in(xv);
      visit(j, xv);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      float xv[V];
      load_column<T, V>(src, row, col0 + j, col_end, width, c, xv, in);
      visit(j, xv);
    }
  }
}

// One strip of a gather: out[r] = init + the sum over rows a, columns j and taps b with
// Cols::target(j, b) == r of src[row_of(a) + (col0 + j) * c] * wt[(a*K + b) * c] (wt: the
// transposed weights at the pack's first channel). Rows with row_of(a) < 0 and columns outside
// [0, col_end) add nothing; out[r] goes to dst[out0 + r * c] for r in [r_begin, r_end). A kernel
// row at a time: 8 x V accumulators and K x V weights live.
template <typename T, int V, class Cols, class RowOf, class In = PlainInput>
__device__ __forceinline__ void gather_strip(const T* __restrict__ src, RowOf row_of, int col0,
                                             int col_end, int width, int c,
                                             const float* __restrict__ wt, const float (&init)[V],
                                             T* __restrict__ dst, int out0, int r_begin, int r_end,
                                             const In& in = In()) {
  constexpr int K = Cols::kK;
  float acc[kStrip][V];
#pragma unroll
  for (int r = 0; r < kStrip; ++r) {
#pragma unroll
    for (int v = 0; v < V; ++v) acc[r][v] = init[v];
  }
  // Note [Interior strips]: a strip whose columns all lie inside [0, col_end) loads them from
  // one row pointer, without the clamps and the zeroing of load_column, whose index arithmetic
  // and selects outnumbered the FMAs (PTX of the f16 3x3 forward that reads batch norm through:
  // 745 integer and select instructions of 1,758, beside 408 FMAs, 444 conversions, 65 loads).
  // Only the strips at a row's two ends take the general path; the values are the same.
  const bool interior = col0 >= 0 && col0 + Cols::kCols <= col_end;
  // Note [Strip code size]: the kernel rows run as a loop, not unrolled. Unrolled, the f16 3x3
  // forward that reads batch norm through was 48.6 KB of SASS (71.5 KB at stride 2), past what
  // a multiprocessor's instruction caches keep close, and ncu put 50-63% of its warps' stalls on
  // instruction fetch (MobileNetV2 f16, H200). A row a pass keeps one row's loads in flight
  // together and the code at 19.8 KB (27.6 KB).
#pragma unroll 1
  for (int a = 0; a < K; ++a) {
    const int row = row_of(a);
    if (row < 0) continue;  // the same for the threads of a warp but at image edges
    float wr[K][V];
#pragma unroll
    for (int b = 0; b < K; ++b) load_floats<float, V>(wt + (a * K + b) * c, wr[b]);
    // acc[r] += x of column j through the taps that feed r
    auto add_column = [&](int j, const float(&xv)[V]) {
      for_each_target<Cols>(j, [&](int b, int r) {
#pragma unroll
        for (int v = 0; v < V; ++v) acc[r][v] = fmaf(xv[v], wr[b][v], acc[r][v]);
      });
    };
    for_each_column<T, V, Cols::kCols>(src, row, col0, col_end, width, c, interior, in, add_column);
  }
#pragma unroll
  for (int r = 0; r < kStrip; ++r) {
    if (r >= r_begin && r < r_end) store_pack<T, V>(dst + (out0 + r * c), acc[r]);
  }
}

// wt[tap, c] = w[c, tap] in f32: weights [C, kh, kw, 1] become packs along the channels, so that
// the threads of a warp (consecutive packs) read consecutive bytes. Read straight from w, each
// thread's V * taps values sit taps * V * sizeof(T) bytes from its neighbour's: a sector a thread.
template <typename T>
__global__ void transpose_weight_kernel(int c, int taps, const T* __restrict__ w,
                                        float* __restrict__ wt) {
  for (int64_t i = thread_index(); i < static_cast<int64_t>(c) * taps; i += grid_stride()) {
    const int ch = static_cast<int>(i / taps), tap = static_cast<int>(i % taps);
    wt[static_cast<int64_t>(tap) * c + ch] = to_f(w[i]);
  }
}

// acc[tap][v] += src[v] * w[v] for one tap: a pack of activations or gradients times the tap's
// transposed weights.
template <typename T, int V>
__device__ __forceinline__ void accumulate_tap(float* acc, const T* src, const float* w) {
  float sv[V], wv[V];
  load_floats<T, V>(src, sv);
  load_floats<float, V>(w, wv);
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = fmaf(sv[v], wv[v], acc[v]);
}

// Item i of a grid over [N, rows, cols] places x cvs channel packs of V, packs fastest: place
// (n, r, col), channels from c0. A place is a pixel (the per-pixel kernels), a strip of kStrip
// pixels along a row (col counts strips) or a window of rows (r counts windows).
struct GridItem {
  int n, r, col, c0;
  __device__ __forceinline__ GridItem(int i, int rows, int cols, int cvs, int v) {
    const int cv = i % cvs;
    int p = i / cvs;
    col = p % cols;
    p /= cols;
    r = p % rows;
    n = p / rows;
    c0 = cv * v;
  }
};

// Weights transposed to [taps, C] f32 in a workspace the caller keeps alive.
template <typename T>
memory::DataPtr transposed_weights(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                                   const void* w) {
  const int taps = static_cast<int>(s.kh * s.kw);
  memory::DataPtr wt = ctx.workspace(static_cast<size_t>(s.c * taps) * sizeof(float));
  transpose_weight_kernel<T><<<grid_for(ctx, s.c * taps), kThreads, 0, stream>>>(
      static_cast<int>(s.c), taps, static_cast<const T*>(w), static_cast<float*>(wt.get()));
  FRUGAL_LAUNCH_CHECK();
  return wt;
}

// A call's weights as its kernel takes them: w as it is (the row windows: Note [Windows read the
// weights as they are] in depthwise_windows.cuh) or transposed (the strips and the per-pixel
// kernels), made on first ask and kept for the call.
template <typename T>
class CallWeights {
 public:
  CallWeights(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* w)
      : ctx_(ctx), stream_(stream), s_(s), w_(static_cast<const T*>(w)) {}
  const T* plain() const { return w_; }
  const float* transposed() {
    if (wt_.get() == nullptr) wt_ = transposed_weights<T>(ctx_, stream_, s_, w_);
    return static_cast<const float*>(wt_.get());
  }

 private:
  const Context& ctx_;
  cudaStream_t stream_;
  const Conv2dShape& s_;
  const T* w_;
  memory::DataPtr wt_;
};

// Whether the forward takes row windows (Note [Row windows] in depthwise_windows.cuh).
inline bool uses_row_windows(const Conv2dShape& s) {
  return s.kh == 3 && s.kw == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dil_h == 1 &&
         s.dil_w == 1;
}

// The length of the runs that split n rows evenly into runs of at most `most` (n, most >= 1): the
// fewest runs that fit, their rows shared out as evenly as they go.
inline int64_t even_run(int64_t n, int64_t most) {
  const int64_t runs = (n + most - 1) / most;
  return (n + runs - 1) / runs;
}

}  // namespace
}  // namespace frugal::kernels::cuda
