// Depthwise NHWC convolution kernels (Note [Depthwise kernels] in depthwise_conv.h): a thread
// owns a pack of 4 channels and a strip of kStrip neighbouring pixels of one row and slides along
// the strip, so each input column is loaded once a strip and each weight once a strip. The weight
// gradient sums strips into an f32 workspace per row split, then adds the splits in a fixed
// order. Strides over 2 and dilation along W take one pixel a thread instead; the 3x3 forward at
// stride 1 walks its strips down rows (Note [Row windows]).
#include <algorithm>
#include <climits>
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
bool uses_strips(const Conv2dShape& s) {
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

// A pack of V values of column `col` of a row (element offset `row` at the pack's first
// channel), made over by `in`, or zeros when col is outside [0, end) (the convolution's padding
// is zero whatever the input's recipe). The load itself always reads inside the row
// (col clamped to [0, w)), so it needs no branch and the compiler can issue a strip's loads
// together; branching around each column's load held a thread to one column's loads in flight.
template <typename T, int V, class In = PlainInput>
__device__ __forceinline__ void load_column(const T* __restrict__ src, int row, int col, int end,
                                            int w, int c, float (&out)[V], const In& in = In()) {
  const int clamped = min(max(col, 0), w - 1);
  load_floats<T, V>(src + row + clamped * c, out);
  in(out);
  const bool inside = static_cast<unsigned>(col) < static_cast<unsigned>(end);
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
__device__ __forceinline__ void gather_strip(const T* __restrict__ src, RowOf row_of,
                                             int col0, int col_end, int width, int c,
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
    for_each_column<T, V, Cols::kCols>(src, row, col0, col_end, width, c, interior, in,
                                       add_column);
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

// y[n, oh, ow, c] = bias[c] + sum_{a, b} x[n, oh*sh - ph + a*dh, ow*S - pw + b, c] * w[c, a, b]
// for a strip of kStrip outputs along W (S = stride_w, dilation_w 1) and a pack of V channels;
// x as In makes it of the loaded values.
template <typename T, int K, int V, int S, class In>
__global__ void __launch_bounds__(kGatherThreads)
    forward_strip_kernel(Geom g, BnActInput bn, const T* __restrict__ x,
                         const float* __restrict__ wt, const T* __restrict__ bias,
                         T* __restrict__ y) {
  const int cvs = g.c / V, strips = (g.ow + kStrip - 1) / kStrip;
  const int total = g.n * g.oh * strips * cvs;  // <= N * OH * OW * C: fits (depthwise_handles)
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const int cv = i % cvs;
    int p = i / cvs;
    const int ow0 = p % strips * kStrip;
    p /= strips;
    const int oh = p % g.oh, n = p / g.oh, c0 = cv * V;
    float init[V] = {};
    if (bias != nullptr) load_floats<T, V>(bias + c0, init);
    auto row_of = [&](int a) {
      return row_offset(int64_t{oh} * g.sh - g.ph + int64_t{a} * g.dh, n, g.h, g.w, g.c, c0);
    };
    const int count = min(kStrip, g.ow - ow0);
    // Past the row's end every column reads nothing, clamped or not.
    const int col0 = static_cast<int>(std::min<int64_t>(int64_t{ow0} * S - g.pw, g.w));
    const int col_end = min(g.w, col0 + (count - 1) * S + K);  // after the last output's columns
    gather_strip<T, V, ReadCols<K, S>>(x, row_of, col0, col_end, g.w, g.c, wt + c0, init, y,
                                       ((n * g.oh + oh) * g.ow + ow0) * g.c + c0, 0, count,
                                       In(bn, c0));
  }
}

// Note [Row windows]: the 3x3 forward at stride 1 without dilation (most depthwise layers of
// the MobileNets) walks a thread down `rows` output rows of its strip of kStrip outputs and
// kWindowPack channels. It keeps the three input rows that the current output row reads in
// registers, made over by In and converted to f32, and each step down loads and makes over only
// the one new row. The strips load and normalize every input pixel 3 x 10/8 = 3.75 times for
// 3x3; a window of R rows does (R + 2)/R x 10/8 times (1.4 at R = 16). Making the input over
// (load, convert, normalize, activate, round, convert back) costs more instructions than its
// taps' FMAs, and the strips were issue bound on it. Two channels a thread keep the window
// (3 x 10 x 2 floats), the accumulators (8 x 2) and the 9 x 2 weights in 125 registers (sm_90).
// MobileNetV2 f16 on an H200: 0.565 ms a step for the stride-1 forward against the strips' 0.726.
constexpr int kWindowPack = 2;

// Mirror: the taps read in reverse order, (a, b) from w's (K-1-a, K-1-b), for the input gradient
// (Note [Input gradients as mirrored forwards]).
//
// Note [Windows read the weights as they are]: w [C, 3, 3, 1] is read in place, not transposed
// to [taps, C] f32 first as the strips take it: a thread's two channels are 18 consecutive
// values, so a warp reads 576 consecutive ones, and it reads them once an item. The transpose
// was a launch of its own before each window (26 of a MobileNetV2 step's 34 transposes).
template <typename T, class In, bool Mirror = false>
__global__ void __launch_bounds__(kGatherThreads)
    forward_window_kernel(Geom g, int rows, BnActInput bn, const T* __restrict__ x,
                          const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ y) {
  constexpr int K = 3, V = kWindowPack;
  using Cols = ReadCols<K, 1>;
  constexpr int kCols = Cols::kCols;
  const int cvs = g.c / V, strips = (g.ow + kStrip - 1) / kStrip;
  const int groups = (g.oh + rows - 1) / rows;
  const int total = g.n * groups * strips * cvs;  // <= N * OH * OW * C / 2: fits
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const int cv = i % cvs;
    int p = i / cvs;
    const int ow0 = p % strips * kStrip;
    p /= strips;
    const int oh_begin = p % groups * rows, n = p / groups, c0 = cv * V;
    const int oh_end = min(g.oh, oh_begin + rows);
    const In in(bn, c0);
    float init[V] = {};
    if (bias != nullptr) load_floats<T, V>(bias + c0, init);
    float wr[K][K][V];
#pragma unroll
    for (int a = 0; a < K; ++a) {
#pragma unroll
      for (int b = 0; b < K; ++b) {
        const int tap = Mirror ? K * K - 1 - (a * K + b) : a * K + b;
#pragma unroll
        for (int v = 0; v < V; ++v) wr[a][b][v] = to_f(w[(c0 + v) * (K * K) + tap]);
      }
    }
    const int count = min(kStrip, g.ow - ow0);
    const int col0 = static_cast<int>(std::min<int64_t>(int64_t{ow0} - g.pw, g.w));
    const int col_end = min(g.w, col0 + (count - 1) + K);
    const bool interior = col0 >= 0 && col0 + kCols <= col_end;
    // window[a]: input row oh - ph + a of the current output row oh, zeros outside the image
    float window[K][kCols][V];
    auto load_row = [&](float(&dst)[kCols][V], int ih) {
      const int row = row_offset(ih, n, g.h, g.w, g.c, c0);
      if (row < 0) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
#pragma unroll
          for (int v = 0; v < V; ++v) dst[j][v] = 0.0f;
        }
      } else {
        for_each_column<T, V, kCols>(x, row, col0, col_end, g.w, g.c, interior, in,
                                     [&](int j, const float(&xv)[V]) {
#pragma unroll
                                       for (int v = 0; v < V; ++v) dst[j][v] = xv[v];
                                     });
      }
    };
#pragma unroll
    for (int a = 0; a < K - 1; ++a) load_row(window[a + 1], oh_begin - g.ph + a);
#pragma unroll 1
    for (int oh = oh_begin; oh < oh_end; ++oh) {
      // slide down one row: the rows a = 1, 2 of the last output row are this one's 0, 1
#pragma unroll
      for (int a = 0; a < K - 1; ++a) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
#pragma unroll
          for (int v = 0; v < V; ++v) window[a][j][v] = window[a + 1][j][v];
        }
      }
      load_row(window[K - 1], oh - g.ph + K - 1);
      float acc[kStrip][V];
#pragma unroll
      for (int r = 0; r < kStrip; ++r) {
#pragma unroll
        for (int v = 0; v < V; ++v) acc[r][v] = init[v];
      }
#pragma unroll
      for (int a = 0; a < K; ++a) {
        for_each_tap<Cols>([&](int j, int b, int r) {
#pragma unroll
          for (int v = 0; v < V; ++v) acc[r][v] = fmaf(window[a][j][v], wr[a][b][v], acc[r][v]);
        });
      }
      const int out0 = ((n * g.oh + oh) * g.ow + ow0) * g.c + c0;
#pragma unroll
      for (int r = 0; r < kStrip; ++r) {
        if (r < count) store_pack<T, V>(y + (out0 + r * g.c), acc[r]);
      }
    }
  }
}

// dx[n, ih, iw, c] = sum over the taps (a, b) and outputs (oh, ow) that read (ih, iw) of
// dy[n, oh, ow, c] * w[c, a, b], for a strip of kStrip input columns (S = stride_w, dilation_w
// 1; GatherCols) and a pack of V channels. Strips start at column -(pw % S) so that every strip
// has the same tap parities: the first strip's column -1 is computed and not stored.
template <typename T, int K, int V, int S>
__global__ void __launch_bounds__(kGatherThreads)
    backward_input_strip_kernel(Geom g, const T* __restrict__ dy, const float* __restrict__ wt,
                                T* __restrict__ dx) {
  using Cols = GatherCols<K, S>;
  const int cvs = g.c / V, shift = g.pw % S;
  const int strips = (g.w + shift + kStrip - 1) / kStrip;
  const int total = g.n * g.h * strips * cvs;  // <= N * H * W * C: fits (depthwise_handles)
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const int cv = i % cvs;
    int p = i / cvs;
    const int iw0 = p % strips * kStrip - shift;
    p /= strips;
    const int ih = p % g.h, n = p / g.h, c0 = cv * V;
    const float init[V] = {};
    auto row_of = [&](int a) {
      const int64_t th = int64_t{ih} + g.ph - int64_t{a} * g.dh;  // oh * sh for a tap that reads ih
      return th >= 0 && th % g.sh == 0 ? row_offset(th / g.sh, n, g.oh, g.ow, g.c, c0) : -1;
    };
    const int r_begin = max(0, -iw0), r_end = min(kStrip, g.w - iw0);
    // (iw0 + pw) / S - M, clamped: past the row's end every column reads nothing either way.
    const int col0 =
        static_cast<int>(std::min<int64_t>((int64_t{iw0} + g.pw) / S - Cols::kM, g.ow));
    // After the last column that feeds a pixel before r_end.
    const int col_end = min(g.ow, col0 + (r_end - 1 + Cols::kM * S) / S + 1);
    gather_strip<T, V, Cols>(dy, row_of, col0, col_end, g.ow, g.c, wt + c0, init, dx,
                             ((n * g.h + ih) * g.w + iw0) * g.c + c0, r_begin, r_end);
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

// Item i of the per-pixel kernels' grid over the pixels x channel packs of an [N, rows, cols, C]
// tensor, cvs = C / V packs a pixel: pixel (n, r, col), channels from c0.
struct PixelPack {
  int n, r, col, c0;
  __device__ __forceinline__ PixelPack(int i, int rows, int cols, int cvs, int v) {
    const int cv = i % cvs;
    int p = i / cvs;
    col = p % cols;
    p /= cols;
    r = p % rows;
    n = p / rows;
    c0 = cv * v;
  }
};

// The forward with one output pixel a thread and any stride and dilation.
template <typename T, int K, int V>
__global__ void forward_pixel_kernel(Geom g, const T* __restrict__ x, const float* __restrict__ wt,
                                     const T* __restrict__ bias, T* __restrict__ y) {
  const int cvs = g.c / V;
  const int total = g.n * g.oh * g.ow * cvs;
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const PixelPack at(i, g.oh, g.ow, cvs, V);
    const int n = at.n, oh = at.r, ow = at.col, c0 = at.c0;
    float acc[V] = {};
    if (bias != nullptr) load_floats<T, V>(bias + c0, acc);
#pragma unroll
    for (int a = 0; a < K; ++a) {
      const int row =
          row_offset(int64_t{oh} * g.sh - g.ph + int64_t{a} * g.dh, n, g.h, g.w, g.c, c0);
      if (row < 0) continue;
#pragma unroll
      for (int b = 0; b < K; ++b) {
        const int64_t iw = int64_t{ow} * g.sw - g.pw + int64_t{b} * g.dw;
        if (iw < 0 || iw >= g.w) continue;
        accumulate_tap<T, V>(acc, x + row + static_cast<int>(iw) * g.c,
                             wt + (a * K + b) * g.c + c0);
      }
    }
    store_pack<T, V>(y + i * V, acc);  // (pixel * C + c0) == i * V
  }
}

// The input gradient with one input pixel a thread and any stride and dilation.
template <typename T, int K, int V>
__global__ void backward_input_pixel_kernel(Geom g, const T* __restrict__ dy,
                                            const float* __restrict__ wt, T* __restrict__ dx) {
  const int cvs = g.c / V;
  const int total = g.n * g.h * g.w * cvs;
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    const PixelPack at(i, g.h, g.w, cvs, V);
    const int n = at.n, ih = at.r, iw = at.col, c0 = at.c0;
    float acc[V] = {};
#pragma unroll
    for (int a = 0; a < K; ++a) {
      const int64_t th = int64_t{ih} + g.ph - int64_t{a} * g.dh;  // oh * sh for a tap that reads ih
      if (th < 0 || th % g.sh != 0) continue;
      const int row = row_offset(th / g.sh, n, g.oh, g.ow, g.c, c0);
      if (row < 0) continue;
#pragma unroll
      for (int b = 0; b < K; ++b) {
        const int64_t tw = int64_t{iw} + g.pw - int64_t{b} * g.dw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.ow) continue;
        accumulate_tap<T, V>(acc, dy + row + static_cast<int>(tw / g.sw) * g.c,
                             wt + (a * K + b) * g.c + c0);
      }
    }
    store_pack<T, V>(dx + i * V, acc);
  }
}

// acc[b][v] += sum over the strip's outputs r < count of dy[dy0 + r*c + v] * x[row, the column
// output r reads through tap b, v], for the one kernel row of x at `row` (ReadCols, as in the
// forward). dy past the row's end reads as 0, so every product is made without a branch.
template <typename T, int K, int V, int S, class In>
__device__ __forceinline__ void weight_strip(const T* __restrict__ x, const T* __restrict__ dy,
                                             int row, int col0, int col_end, int width, int c,
                                             int dy0, int count, const In& in,
                                             float (&acc)[K * V]) {
  using Cols = ReadCols<K, S>;
  float gv[kStrip][V];
  // acc[b] += dy of the output column j feeds through tap b, times x of column j
  auto add_column = [&](int j, const float(&xv)[V]) {
    for_each_target<Cols>(j, [&](int b, int r) {
#pragma unroll
      for (int v = 0; v < V; ++v) acc[b * V + v] = fmaf(gv[r][v], xv[v], acc[b * V + v]);
    });
  };
  // a whole strip inside the row: straight loads (Note [Interior strips])
  const bool interior = count == kStrip && col0 >= 0 && col0 + Cols::kCols <= col_end;
  if (interior) {
#pragma unroll
    for (int r = 0; r < kStrip; ++r) load_floats<T, V>(dy + dy0 + r * c, gv[r]);
  } else {
#pragma unroll
    for (int r = 0; r < kStrip; ++r) load_column<T, V>(dy, dy0, r, count, count, c, gv[r]);
  }
  for_each_column<T, V, Cols::kCols>(x, row, col0, col_end, width, c, interior, in, add_column);
}

// acc[b][v] += dy[n, oh, ow, c0 + v] * x[the input of (oh, ow) through tap (a, b), c0 + v] for
// the thread's kernel row a, any stride and dilation.
template <typename T, int K, int V, class In>
__device__ __forceinline__ void weight_pixel(const Geom& g, const T* __restrict__ x,
                                             const T* __restrict__ dy, int n, int oh, int ow, int a,
                                             int c0, const In& in, float (&acc)[K * V]) {
  const int row = row_offset(int64_t{oh} * g.sh - g.ph + int64_t{a} * g.dh, n, g.h, g.w, g.c, c0);
  if (row < 0) return;
  float gv[V];
  load_floats<T, V>(dy + ((n * g.oh + oh) * g.ow + ow) * g.c + c0, gv);
#pragma unroll
  for (int b = 0; b < K; ++b) {
    const int64_t iw = int64_t{ow} * g.sw - g.pw + int64_t{b} * g.dw;
    if (iw < 0 || iw >= g.w) continue;
    float xv[V];
    load_floats<T, V>(x + row + static_cast<int>(iw) * g.c, xv);
    in(xv);
#pragma unroll
    for (int v = 0; v < V; ++v) acc[b * V + v] = fmaf(gv[v], xv[v], acc[b * V + v]);
  }
}

// One block: `lanes` consecutive channel packs x K kernel rows (block column a * lanes + lane)
// x kThreads / (lanes * K) rows of work items, items strided over the row splits (blockIdx.y).
// Items are strips of kStrip outputs along W for S = stride_w in {1, 2}, single outputs (any
// stride) for S = 0. A thread sums the K taps of its kernel row: K x V accumulators, so the
// 25-tap 5x5 needs no more registers than 3x3; the K threads of an item share its dy loads
// through L1. Writes partial[split, c, tap] = sum over its items' outputs p of
// dy[p, c] * x[tap's input of p, c].
template <typename T, int K, int V, int S, class In>
__global__ void __launch_bounds__(kThreads)
    backward_weight_partial_kernel(Geom g, int lanes, BnActInput bn, const T* __restrict__ x,
                                   const T* __restrict__ dy, float* __restrict__ partial) {
  const int cvs = g.c / V, columns = lanes * K, rows = kThreads / columns;
  const int column = static_cast<int>(threadIdx.x) % columns;
  const int r = static_cast<int>(threadIdx.x) / columns;
  const int lane = column % lanes, a = column / lanes;
  const int cv = static_cast<int>(blockIdx.x) * lanes + lane;
  float acc[K * V];  // [b][v] of kernel row a
#pragma unroll
  for (int m = 0; m < K * V; ++m) acc[m] = 0.0f;
  if (r < rows && cv < cvs) {
    const int c0 = cv * V;
    const In in(bn, c0);  // the thread's channels are fixed: their numbers load once
    const int per_row = S > 0 ? (g.ow + kStrip - 1) / kStrip : g.ow;
    const int items = g.n * g.oh * per_row;  // <= N * OH * OW: fits
    const int step = static_cast<int>(gridDim.y) * rows;
    // The item's image n, output row oh and place s in the row, stepped along with the item
    // instead of divided out of it: the divisions cost about as many integer instructions as
    // an item's taps, and the ALU pipe bounds these kernels.
    int item = static_cast<int>(blockIdx.y) * rows + r;
    const int step_s = step % per_row, step_q = step / per_row;
    const int step_oh = step_q % g.oh, step_n = step_q / g.oh;
    int s = item % per_row, oh = item / per_row % g.oh, n = item / per_row / g.oh;
    auto next = [&] {
      item += step;
      s += step_s;
      const int carry = s >= per_row ? 1 : 0;
      s -= carry * per_row;
      oh += step_oh + carry;  // < 2 * g.oh
      const int wrap = oh >= g.oh ? 1 : 0;
      oh -= wrap * g.oh;
      n += step_n + wrap;
    };
    for (; item < items; next()) {
      if constexpr (S > 0) {
        const int row =
            row_offset(int64_t{oh} * g.sh - g.ph + int64_t{a} * g.dh, n, g.h, g.w, g.c, c0);
        if (row < 0) continue;
        const int ow0 = s * kStrip;
        const int count = min(kStrip, g.ow - ow0);
        const int col0 = static_cast<int>(std::min<int64_t>(int64_t{ow0} * S - g.pw, g.w));
        const int col_end = min(g.w, col0 + (count - 1) * S + K);
        weight_strip<T, K, V, S>(x, dy, row, col0, col_end, g.w, g.c,
                                 ((n * g.oh + oh) * g.ow + ow0) * g.c + c0, count, in, acc);
      } else {
        weight_pixel<T, K, V>(g, x, dy, n, oh, s, a, c0, in, acc);
      }
    }
  }
  // Sum over the block's rows (Note [Block row sums]); block column l = a * lanes + lane,
  // m = b * V + v.
  const int64_t cv0 = static_cast<int64_t>(blockIdx.x) * lanes;
  sum_block_rows(acc, columns, rows, [&](int l, int m, float sum) {
    const int64_t pack = cv0 + l % lanes;
    if (pack < cvs) {
      const int tap = l / lanes * K + m / V;
      partial[(static_cast<int64_t>(blockIdx.y) * g.c + pack * V + m % V) * (K * K) + tap] = sum;
    }
  });
}

// Note [Weight gradients by input rows]: the 3x3 stride-1 weight gradient sums dw[a][b] +=
// x[ih, ow - pw + b] * dy[ih + ph - a, ow] over the input rows ih: a thread walks down `rows`
// input rows of a strip (kStrip outputs, kStrip + 2 input columns) and kWindowPack channels,
// loads and makes over (In) each input row once, and pairs it with the up to three dy rows it
// feeds, which load again for each of their three input rows; dy needs no making over, so
// reading it three times costs little where reading x 3.75 times (the strips) cost most of the
// kernel. The items split the input rows, so every product is summed exactly once. One block:
// `lanes` channel pairs x kThreads / lanes rows of items, items strided over the row splits
// (blockIdx.y); partial[split, c, tap] as backward_weight_partial_kernel writes it.
//
// Three blocks a multiprocessor (__launch_bounds__): left to itself the compiler took 88-93
// registers, two blocks of 256, and ncu timed MobileNetV2's f16 step's 13 launches at 0.80 ms;
// held to 80 registers (sm_90; f32 spills 8 bytes, f16 and bf16 none) they take 0.67 ms.
template <typename T, class In>
__global__ void __launch_bounds__(kThreads, 3)
    backward_weight_rows_kernel(Geom g, int lanes, int rows, BnActInput bn, const T* __restrict__ x,
                                const T* __restrict__ dy, float* __restrict__ partial) {
  constexpr int K = 3, V = kWindowPack;
  using Cols = ReadCols<K, 1>;
  constexpr int kCols = Cols::kCols;
  const int cvs = g.c / V, block_rows = kThreads / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const int r = static_cast<int>(threadIdx.x) / lanes;
  const int cv = static_cast<int>(blockIdx.x) * lanes + lane;
  float acc[K * K * V];  // [a][b][v]
#pragma unroll
  for (int m = 0; m < K * K * V; ++m) acc[m] = 0.0f;
  if (r < block_rows && cv < cvs) {
    const int c0 = cv * V;
    const In in(bn, c0);
    const int strips = (g.ow + kStrip - 1) / kStrip, groups = (g.h + rows - 1) / rows;
    const int items = g.n * groups * strips;  // <= N * H * OW: fits
    const int step = static_cast<int>(gridDim.y) * block_rows;
    for (int item = static_cast<int>(blockIdx.y) * block_rows + r; item < items; item += step) {
      const int ow0 = item % strips * kStrip, q = item / strips;
      const int ih_begin = q % groups * rows, n = q / groups;
      const int ih_end = min(g.h, ih_begin + rows);
      const int count = min(kStrip, g.ow - ow0);
      const int col0 = static_cast<int>(std::min<int64_t>(int64_t{ow0} - g.pw, g.w));
      const int col_end = min(g.w, col0 + (count - 1) + K);
      const bool interior = col0 >= 0 && col0 + kCols <= col_end;
#pragma unroll 1
      for (int ih = ih_begin; ih < ih_end; ++ih) {
        const int row = ((n * g.h + ih) * g.w) * g.c + c0;
        float xr[kCols][V];
        for_each_column<T, V, kCols>(x, row, col0, col_end, g.w, g.c, interior, in,
                                     [&](int j, const float(&xv)[V]) {
#pragma unroll
                                       for (int v = 0; v < V; ++v) xr[j][v] = xv[v];
                                     });
#pragma unroll
        for (int a = 0; a < K; ++a) {
          const int oh = ih + g.ph - a;  // the output row that reads ih through kernel row a
          if (oh < 0 || oh >= g.oh) continue;
          const int dy0 = ((n * g.oh + oh) * g.ow + ow0) * g.c + c0;
          float gv[kStrip][V];  // 0 past the row's end
          if (count == kStrip) {
#pragma unroll
            for (int o = 0; o < kStrip; ++o) load_floats<T, V>(dy + dy0 + o * g.c, gv[o]);
          } else {
#pragma unroll
            for (int o = 0; o < kStrip; ++o) {
              load_column<T, V>(dy, dy0, o, count, count, g.c, gv[o]);
            }
          }
          for_each_tap<Cols>([&](int j, int b, int o) {
#pragma unroll
            for (int v = 0; v < V; ++v) {
              float& sum = acc[(a * K + b) * V + v];
              sum = fmaf(gv[o][v], xr[j][v], sum);
            }
          });
        }
      }
    }
  }
  // Sum over the block's rows (Note [Block row sums]); m = tap * V + v.
  const int64_t cv0 = static_cast<int64_t>(blockIdx.x) * lanes;
  sum_block_rows(acc, lanes, block_rows, [&](int l, int m, float sum) {
    const int64_t pack = cv0 + l;
    if (pack < cvs) {
      partial[(static_cast<int64_t>(blockIdx.y) * g.c + pack * V + m % V) * (K * K) + m / V] = sum;
    }
  });
}

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
// weights as they are]) or transposed (the strips and the per-pixel kernels), made on first ask
// and kept for the call.
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

// With In other than PlainInput only where uses_strips (depthwise_fuses_bn_act).
template <typename T, int K, int V, class In>
void forward_kv(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const BnActInput& bn,
                const T* x, const float* wt, const T* bias, T* y) {
  const Geom g = geom_of(s);
  if (uses_strips(s)) {
    const int64_t work = s.n * s.oh() * ((s.ow() + kStrip - 1) / kStrip) * (s.c / V);
    const auto kernel = s.stride_w == 1 ? forward_strip_kernel<T, K, V, 1, In>
                                        : forward_strip_kernel<T, K, V, 2, In>;
    // one wave (Note [Grids by occupancy] in cuda_common.cuh)
    kernel<<<resident_grid(ctx, kernel, work, kGatherThreads), kGatherThreads, 0, stream>>>(
        g, bn, x, wt, bias, y);
  } else if constexpr (std::is_same_v<In, PlainInput>) {
    const int64_t work = s.n * s.oh() * s.ow() * (s.c / V);
    forward_pixel_kernel<T, K, V><<<grid_for(ctx, work), kThreads, 0, stream>>>(g, x, wt, bias, y);
  }
  FRUGAL_LAUNCH_CHECK();
}

template <typename T, int K, int V>
void backward_input_kv(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const T* dy,
                       const float* wt, T* dx) {
  const Geom g = geom_of(s);
  if (uses_strips(s)) {
    const int64_t strips = (s.w + s.pad_w % s.stride_w + kStrip - 1) / kStrip;
    const auto kernel = s.stride_w == 1 ? backward_input_strip_kernel<T, K, V, 1>
                                        : backward_input_strip_kernel<T, K, V, 2>;
    const int64_t work = s.n * s.h * strips * (s.c / V);
    kernel<<<resident_grid(ctx, kernel, work, kGatherThreads), kGatherThreads, 0, stream>>>(g, dy,
                                                                                            wt, dx);
  } else {
    const int64_t work = s.n * s.h * s.w * (s.c / V);
    backward_input_pixel_kernel<T, K, V>
        <<<grid_for(ctx, work), kThreads, 0, stream>>>(g, dy, wt, dx);
  }
  FRUGAL_LAUNCH_CHECK();
}

// Row splits of the weight gradient: the blocks of `kernel` the device holds at once (Note [Grids
// by occupancy] in cuda_common.cuh), each thread still summing at least 2 strips (or 8 single
// outputs), and the partial sums (written, then read by the finish) at most an eighth of the
// traffic of x and dy, which caps the splits of layers with few positions and many channels
// (7x7 x 1152 at 5x5: 31 splits).
template <int K, typename Kernel>
int weight_row_splits(const Context& ctx, const Conv2dShape& s, Kernel* kernel, int64_t blocks_x,
                      int rows, size_t elem_bytes) {
  const bool strips = uses_strips(s);
  const int64_t items = s.n * s.oh() * (strips ? (s.ow() + kStrip - 1) / kStrip : s.ow());
  const int64_t per_thread = strips ? 2 : 8;
  const int64_t target = resident_fill(ctx, kernel, kThreads);
  const int64_t activations =
      (s.n * s.h * s.w + s.n * s.oh() * s.ow()) * s.c * static_cast<int64_t>(elem_bytes);
  const int64_t per_split = s.c * K * K * static_cast<int64_t>(sizeof(float));
  const int64_t splits =
      std::min<int64_t>({target / std::max<int64_t>(blocks_x, 1),
                         (items + rows * per_thread - 1) / (rows * per_thread),
                         activations / 8 / std::max<int64_t>(per_split, 1), 1024});
  return static_cast<int>(std::max<int64_t>(1, splits));
}

template <typename T, int K, int V, class In>
void backward_weight_kv(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                        const BnActInput& bn, const T* x, const T* dy, DType dw_dtype, void* dw) {
  const Geom g = geom_of(s);
  const int64_t cvs = s.c / V;
  const int lanes = static_cast<int>(std::min<int64_t>(cvs, kWeightLanes));
  const int rows = kThreads / (lanes * K);
  const int64_t blocks_x = (cvs + lanes - 1) / lanes;
  const int64_t n = s.c * K * K;
  auto launch = [&](auto* kernel) {
    const int splits = weight_row_splits<K>(ctx, s, kernel, blocks_x, rows, sizeof(T));
    memory::DataPtr ws = ctx.workspace(static_cast<size_t>(splits * n) * sizeof(float));
    auto partial = static_cast<float*>(ws.get());
    dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
    kernel<<<grid, kThreads, 0, stream>>>(g, lanes, bn, x, dy, partial);
    FRUGAL_LAUNCH_CHECK();
    finish_weight_gradient<T>(ctx, stream, n, splits, partial, dw_dtype, dw);
  };
  if (!uses_strips(s)) {
    if constexpr (std::is_same_v<In, PlainInput>) {  // depthwise_fuses_bn_act: strips only
      launch(backward_weight_partial_kernel<T, K, V, 0, In>);
    }
  } else if (s.stride_w == 1) {
    launch(backward_weight_partial_kernel<T, K, V, 1, In>);
  } else {
    launch(backward_weight_partial_kernel<T, K, V, 2, In>);
  }
}

// Whether the forward takes row windows (Note [Row windows]).
bool uses_row_windows(const Conv2dShape& s) {
  return s.kh == 3 && s.kw == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dil_h == 1 &&
         s.dil_w == 1;
}

// Note [Window rows by waves]: a window's rows (Note [Row windows]) trade the two extra input
// rows each item loads against the items there are to spread over the resident threads. Items
// run in waves of the resident threads, so a thread walks ceil(items / resident) items of rows + 2
// loaded rows each; window_rows picks, among the row counts that split the image's rows evenly,
// the one that makes this walk shortest (the fewer rows loaded in all on a tie). The former rule
// (as many rows as filled one wave, 2 to 16) left uneven groups (14 rows as 10 + 4, 7 as 6 + 1)
// and partial last waves. Walks over 28 rows are not taken: one long wave of them ran at 2.3 us
// a row where several waves of short ones ran at 1.4-1.8 (MobileNetV2's 56x56x144 layer: 133 us
// at 56 rows, 118-120 us at 10-28). In MobileNetV2's f16 step at batch 128 (H200, ncu) the 26
// forward and input-gradient windows take 0.97 ms this way, 1.12 ms by the former rule; the best
// of fixed row counts 2-56, launch by launch, would make 0.94 ms.
constexpr int64_t kMaxWindowRows = 28;

// The length of the runs that split n rows evenly into runs of at most `most` (n, most >= 1): the
// fewest runs that fit, their rows shared out as evenly as they go.
int64_t even_run(int64_t n, int64_t most) {
  const int64_t runs = (n + most - 1) / most;
  return (n + runs - 1) / runs;
}

template <typename Kernel>
int window_rows(const Context& ctx, const Conv2dShape& s, Kernel* kernel) {
  const int64_t oh = s.oh();
  const int64_t columns = s.n * ((s.ow() + kStrip - 1) / kStrip) * (s.c / kWindowPack);
  const int64_t resident =
      std::max<int64_t>(resident_fill(ctx, kernel, kGatherThreads) * kGatherThreads, 1);
  int64_t best = 2, best_walk = INT64_MAX, best_loaded = INT64_MAX;
  for (int64_t rows = 2; rows <= std::max<int64_t>(std::min(oh, kMaxWindowRows), 2); ++rows) {
    if (even_run(oh, rows) != rows) continue;  // uneven: fewer rows split the same way
    const int64_t groups = (oh + rows - 1) / rows;
    const int64_t items = columns * groups;
    const int64_t walk = (items + resident - 1) / resident * (rows + 2);
    const int64_t loaded = items * (rows + 2);
    if (walk < best_walk || (walk == best_walk && loaded < best_loaded)) {
      best = rows, best_walk = walk, best_loaded = loaded;
    }
  }
  return static_cast<int>(best);
}

template <typename T, class In, bool Mirror = false>
void forward_window(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                    const BnActInput& bn, const T* x, const T* w, const T* bias, T* y) {
  const auto kernel = forward_window_kernel<T, In, Mirror>;
  const int rows = window_rows(ctx, s, kernel);
  const int64_t work =
      s.n * ((s.oh() + rows - 1) / rows) * ((s.ow() + kStrip - 1) / kStrip) * (s.c / kWindowPack);
  kernel<<<resident_grid(ctx, kernel, work, kGatherThreads), kGatherThreads, 0, stream>>>(
      geom_of(s), rows, bn, x, w, bias, y);
  FRUGAL_LAUNCH_CHECK();
}

// Input rows an item of the weight gradient by rows walks: the image's rows split evenly into runs
// of at most 7. The former rule (as many rows as gave the resident blocks an item a thread, 2 to
// 16) mostly took 16: MobileNetV2's f16 step's 13 launches (batch 128, H200, ncu) take 0.57 ms at
// 7 rows against 0.68 ms by it. Swept over fixed row counts 2-56, the best of each launch would
// make 0.55 ms, and no launch was more than 7% slower at 7 than at its best.
int weight_rows_per_item(int64_t h) { return h < 1 ? 1 : static_cast<int>(even_run(h, 7)); }

// The weight gradient by input rows (Note [Weight gradients by input rows]): items of
// weight_rows_per_item rows and row splits such that the blocks the device holds at once have an
// item a thread, the partial sums capped as weight_row_splits caps them.
template <typename T, class In>
void backward_weight_rows(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                          const BnActInput& bn, const T* x, const T* dy, DType dw_dtype, void* dw) {
  constexpr int K = 3;
  const auto kernel = backward_weight_rows_kernel<T, In>;
  const int64_t cvs = s.c / kWindowPack;
  const int lanes = static_cast<int>(std::min<int64_t>(cvs, 2 * kWeightLanes));
  const int block_rows = kThreads / lanes;
  const int64_t blocks_x = (cvs + lanes - 1) / lanes;
  const int64_t strips = (s.ow() + kStrip - 1) / kStrip;
  const int64_t resident_rows = resident_fill(ctx, kernel, kThreads) / blocks_x * block_rows;
  const int rows = weight_rows_per_item(s.h);
  const int64_t items = s.n * ((s.h + rows - 1) / rows) * strips;
  const int64_t activations =
      (s.n * s.h * s.w + s.n * s.oh() * s.ow()) * s.c * static_cast<int64_t>(sizeof(T));
  const int64_t n = s.c * K * K;
  const int64_t splits = std::max<int64_t>(
      1, std::min<int64_t>({std::max<int64_t>(resident_rows / block_rows, 1),
                            (items + block_rows - 1) / block_rows,
                            activations / 8 / (n * static_cast<int64_t>(sizeof(float))), 1024}));
  memory::DataPtr ws = ctx.workspace(static_cast<size_t>(splits * n) * sizeof(float));
  auto partial = static_cast<float*>(ws.get());
  dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits));
  kernel<<<grid, kThreads, 0, stream>>>(geom_of(s), lanes, rows, bn, x, dy, partial);
  FRUGAL_LAUNCH_CHECK();
  finish_weight_gradient<T>(ctx, stream, n, static_cast<int>(splits), partial, dw_dtype, dw);
}

// With bn, packs fit and the strips take the shape (depthwise_reads_bn_act).
template <typename T, int K>
void forward_k(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* x,
               CallWeights<T>& w, const void* bias, void* y, const BnActInput* bn) {
  auto xt = static_cast<const T*>(x), bt = static_cast<const T*>(bias);
  auto yt = static_cast<T*>(y);
  if (K == 3 && uses_row_windows(s) &&
      (bn != nullptr || packs_fit<T, kWindowPack>(s.c, {x, bias, y}))) {
    with_input<T, kWindowPack>(bn, [&](auto in) {
      using In = typename decltype(in)::type;
      forward_window<T, In>(ctx, stream, s, bn != nullptr ? *bn : BnActInput{}, xt, w.plain(), bt,
                            yt);
    });
  } else if (bn != nullptr || packs_fit<T, kPack>(s.c, {x, bias, y})) {
    with_input<T, kPack>(bn, [&](auto in) {
      using In = typename decltype(in)::type;
      forward_kv<T, K, kPack, In>(ctx, stream, s, bn != nullptr ? *bn : BnActInput{}, xt,
                                  w.transposed(), bt, yt);
    });
  } else {
    forward_kv<T, K, 1, PlainInput>(ctx, stream, s, BnActInput{}, xt, w.transposed(), bt, yt);
  }
}

// Note [Input gradients as mirrored forwards]: at stride 1 without dilation, dx[ih, iw] = sum
// over the taps (a, b) of dy[ih + ph - a, iw + pw - b] * w[a, b]: the forward over dy with the
// taps mirrored, (a, b) -> (K-1-a, K-1-b), and padding K-1-ph and K-1-pw, whose output is h x w
// again. So the 3x3 input gradient takes the forward's row windows (Note [Row windows]) instead
// of the gather strips, which load each dy pixel 3.75 times.
Conv2dShape mirrored_shape(const Conv2dShape& s) {
  Conv2dShape m = s;
  m.h = s.oh(), m.w = s.ow();
  m.pad_h = s.kh - 1 - s.pad_h, m.pad_w = s.kw - 1 - s.pad_w;
  return m;
}

template <typename T, int K>
void backward_input_k(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* dy,
                      CallWeights<T>& w, void* dx) {
  auto dyt = static_cast<const T*>(dy);
  auto dxt = static_cast<T*>(dx);
  if (K == 3 && uses_row_windows(s) && s.pad_h < K && s.pad_w < K &&
      packs_fit<T, kWindowPack>(s.c, {dy, dx})) {
    forward_window<T, PlainInput, true>(ctx, stream, mirrored_shape(s), BnActInput{}, dyt,
                                        w.plain(), nullptr, dxt);
  } else if (packs_fit<T, kPack>(s.c, {dy, dx})) {
    backward_input_kv<T, K, kPack>(ctx, stream, s, dyt, w.transposed(), dxt);
  } else {
    backward_input_kv<T, K, 1>(ctx, stream, s, dyt, w.transposed(), dxt);
  }
}

// With bn, packs fit and the strips take the shape (depthwise_reads_bn_act).
template <typename T, int K>
void backward_weight_k(const Context& ctx, cudaStream_t stream, const Conv2dShape& s, const void* x,
                       const void* dy, DType dw_dtype, void* dw, const BnActInput* bn) {
  auto xt = static_cast<const T*>(x), dyt = static_cast<const T*>(dy);
  if (K == 3 && uses_row_windows(s) && (bn != nullptr || packs_fit<T, kWindowPack>(s.c, {x, dy}))) {
    with_input<T, kWindowPack>(bn, [&](auto in) {
      using In = typename decltype(in)::type;
      backward_weight_rows<T, In>(ctx, stream, s, bn != nullptr ? *bn : BnActInput{}, xt, dyt,
                                  dw_dtype, dw);
    });
  } else if (bn != nullptr || packs_fit<T, kPack>(s.c, {x, dy})) {
    with_input<T, kPack>(bn, [&](auto in) {
      using In = typename decltype(in)::type;
      backward_weight_kv<T, K, kPack, In>(ctx, stream, s, bn != nullptr ? *bn : BnActInput{}, xt,
                                          dyt, dw_dtype, dw);
    });
  } else {
    backward_weight_kv<T, K, 1, PlainInput>(ctx, stream, s, BnActInput{}, xt, dyt, dw_dtype, dw);
  }
}

}  // namespace

bool depthwise_reads_bn_act(DType dtype, const Conv2dShape& s, const BnActInput& in,
                            std::initializer_list<const void*> pointers) {
  if (!depthwise_fuses_bn_act(s, in.act) || s.c % kPack != 0) return false;
  auto aligned = [](const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  const size_t pack_bytes = kPack * dtype_size(dtype), stats_bytes = kPack * sizeof(float);
  return std::all_of(pointers.begin(), pointers.end(),
                     [&](const void* p) { return aligned(p, pack_bytes); }) &&
         aligned(in.mean, stats_bytes) && aligned(in.invstd, stats_bytes) &&
         aligned(in.gamma, stats_bytes) && aligned(in.beta, stats_bytes);
}

void depthwise_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                       const void* w, const void* bias, void* y, const BnActInput* bn) {
  const char* op = "conv2d_forward (depthwise)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CHECK(bn == nullptr || depthwise_reads_bn_act(dtype, s, *bn, {x, bias, y}), op,
               ": no kernel normalizes its loads for ", s.str());
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    CallWeights<T> weights(ctx, stream, s, w);
    if (s.kh == 3)
      forward_k<T, 3>(ctx, stream, s, x, weights, bias, y, bn);
    else
      forward_k<T, 5>(ctx, stream, s, x, weights, bias, y, bn);
  });
}

void depthwise_backward_input(const Context& ctx, DType dtype, const Conv2dShape& s, const void* dy,
                              const void* w, void* dx) {
  const char* op = "conv2d_backward_input (depthwise)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    CallWeights<T> weights(ctx, stream, s, w);
    if (s.kh == 3)
      backward_input_k<T, 3>(ctx, stream, s, dy, weights, dx);
    else
      backward_input_k<T, 5>(ctx, stream, s, dy, weights, dx);
  });
}

void depthwise_backward_weight(const Context& ctx, DType dtype, DType dw_dtype,
                               const Conv2dShape& s, const void* x, const void* dy, void* dw,
                               const BnActInput* bn) {
  const char* op = "conv2d_backward_weight (depthwise)";
  cudaStream_t stream = stream_of(ctx, op);
  FRUGAL_CHECK(bn == nullptr || depthwise_reads_bn_act(dtype, s, *bn, {x, dy}), op,
               ": no kernel normalizes its loads for ", s.str());
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    if (s.kh == 3)
      backward_weight_k<T, 3>(ctx, stream, s, x, dy, dw_dtype, dw, bn);
    else
      backward_weight_k<T, 5>(ctx, stream, s, x, dy, dw_dtype, dw, bn);
  });
}

}  // namespace frugal::kernels::cuda
