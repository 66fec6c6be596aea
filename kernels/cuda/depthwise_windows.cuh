// The depthwise row windows (Note [Row windows]): the 3x3 forward at stride 1, and through
// mirrored taps the 3x3 input gradient at stride 1 (Note [Input gradients as mirrored forwards]
// in depthwise_backward_input.cu).
#pragma once

#include <cuda_pipeline_primitives.h>

#include <cstdint>

#include "kernels/cuda/depthwise_common.cuh"

namespace frugal::kernels::cuda {
namespace {

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
//
// Mirror: the taps read in reverse order, (a, b) from w's (K-1-a, K-1-b), for the input gradient
// (Note [Input gradients as mirrored forwards] in depthwise_backward_input.cu).
//
// Note [Windows read the weights as they are]: w [C, 3, 3, 1] is read in place, not transposed
// to [taps, C] f32 first as the strips take it: a thread's two channels are 18 consecutive
// values, so a warp reads 576 consecutive ones, and it reads them once an item. The transpose
// was a launch of its own before each window (26 of a MobileNetV2 step's 34 transposes).
// Note [Windows stage rows ahead]: with kAhead > 0 each step's new input row is copied to shared
// memory (cp.async) kAhead steps ahead, while the steps before it multiply, and made over from
// there. Loaded and made over at once (kAhead 0), each step waits out a whole load's latency:
// ncu put half of the windows' stall cycles on L1TEX waits, at 125 registers and 22% occupancy
// (MobileNetV2 f16, H200, session 23). Held in registers, the row ahead needed registers the
// window did not have and lost ("Prefetched window rows" in bench/RESULTS.md: 0.580 against
// 0.560 ms); copies to shared memory hold none, and ptxas fits every staged kernel in four blocks
// of 128 threads a multiprocessor without spills (sm_90), as kAhead 0 runs. The values, the
// products and their order are the same for every kAhead (bench/window_stage_probe.cu checks
// them bit for bit). The 26 windows of MobileNetV2's step at batch 128 (H200, the probe's
// replayed launches), kAhead 0 / 1 / 2: f16 986 / 938 / 921 us, bf16 998 / 960 / 942. Two rows
// ahead gain most on the large layers (112x112x32 and 56x56x144 forward 5% and 13%, their input
// gradients 12% and 19%); the 28x28, 14x14x576 and 7x7 forwards lose 4-7%, less in all.
constexpr int kWindowRowsAhead = 2;

// The shared slots of the staged rows, [ring][column][thread]: each thread's slot beside its
// neighbours' (no bank conflicts). Only the thread that copied a slot reads it, so
// __pipeline_wait_prior is all the synchronization there is.
template <typename T, int V, int kCols, int kRing>
__device__ __forceinline__ auto staged_slots() -> Pack<T, V> (&)[kRing][kCols][kGatherThreads] {
  __shared__ Pack<T, V> slots[kRing][kCols][kGatherThreads];
  return slots;
}

// Staged, four blocks a multiprocessor are asked for (ptxas would take 145 registers, three);
// kAhead 0 asks nothing (a minimum of 0), so it compiles to the kernel it was before staging.
template <typename T, class In, bool Mirror = false, int kAhead = kWindowRowsAhead>
__global__ void __launch_bounds__(kGatherThreads, kAhead > 0 ? 4 : 0)
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
    const GridItem at(i, groups, strips, cvs, V);
    const int n = at.n, oh_begin = at.r * rows, ow0 = at.col * kStrip, c0 = at.c0;
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
    // Staged rows (Note [Windows stage rows ahead]), generic lambdas so that kAhead 0
    // instantiates neither: the row of input row ih copied into ring slot `slot`, and a staged
    // row made over by In into dst, zeros outside the image and outside [0, col_end) as
    // load_row's.
    constexpr int kRing = kAhead + 1;
    auto stage_row = [&](auto slot, int ih) {
      auto& slots = staged_slots<T, V, kCols, kRing>();
      if (const int row = row_offset(ih, n, g.h, g.w, g.c, c0); row >= 0) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          // as for_each_column: straight inside the row, clamped into it at its ends
          const int col = interior ? col0 + j : clamped_column(col0 + j, g.w);
          __pipeline_memcpy_async(&slots[slot][j][threadIdx.x], x + row + col * g.c,
                                  sizeof(Pack<T, V>));
        }
      }
      __pipeline_commit();  // a group even when empty: wait_prior counts groups
    };
    auto make_row = [&](auto slot, int ih, float(&dst)[kCols][V]) {
      auto& slots = staged_slots<T, V, kCols, kRing>();
      const bool in_image = row_offset(ih, n, g.h, g.w, g.c, c0) >= 0;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        float xv[V] = {};
        if (in_image) {
          const Pack<T, V> pk = slots[slot][j][threadIdx.x];
#pragma unroll
          for (int v = 0; v < V; ++v) xv[v] = to_f(pk.v[v]);
          in(xv);
        }
        const bool inside = in_image && (interior || column_inside(col0 + j, col_end));
#pragma unroll
        for (int v = 0; v < V; ++v) dst[j][v] = inside ? xv[v] : 0.0f;
      }
    };
    // the new rows of the first kAhead steps, in flight beside the two loaded below
    [[maybe_unused]] int slot = 0;  // the ring slot of this step's row
    if constexpr (kAhead > 0) {
#pragma unroll
      for (int t = 0; t < kAhead; ++t) {
        if (oh_begin + t < oh_end) {
          stage_row(t, oh_begin + t - g.ph + K - 1);
        } else {
          __pipeline_commit();
        }
      }
    }
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
      if constexpr (kAhead == 0) {
        load_row(window[K - 1], oh - g.ph + K - 1);
      } else {
        // step oh + kAhead's row into the slot read out a step ago, then this step's row
        const int ahead_slot = slot + kAhead < kRing ? slot + kAhead : slot + kAhead - kRing;
        if (oh + kAhead < oh_end) {
          stage_row(ahead_slot, oh + kAhead - g.ph + K - 1);
        } else {
          __pipeline_commit();
        }
        __pipeline_wait_prior(kAhead);
        make_row(slot, oh - g.ph + K - 1, window[K - 1]);
        slot = slot + 1 < kRing ? slot + 1 : 0;
      }
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

template <typename T, class In, bool Mirror = false, int kAhead = kWindowRowsAhead>
void forward_window(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                    const BnActInput& bn, const T* x, const T* w, const T* bias, T* y) {
  const auto kernel = forward_window_kernel<T, In, Mirror, kAhead>;
  const int rows = window_rows(ctx, s, kernel);
  const int64_t work =
      s.n * ((s.oh() + rows - 1) / rows) * ((s.ow() + kStrip - 1) / kStrip) * (s.c / kWindowPack);
  kernel<<<resident_grid(ctx, kernel, work, kGatherThreads), kGatherThreads, 0, stream>>>(
      geom_of(s), rows, bn, x, w, bias, y);
  FRUGAL_LAUNCH_CHECK();
}

}  // namespace
}  // namespace frugal::kernels::cuda
