// The depthwise weight gradient by input rows (Note [Weight gradients by input rows]): the 3x3 at
// stride 1 without dilation, the row windows' weight gradient (depthwise_backward_weight.cu
// takes it where uses_row_windows admits the shape).
#pragma once

#include <cstdint>

#include "kernels/cuda/depthwise_common.cuh"

namespace frugal::kernels::cuda {
namespace {

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
//
// Note [Weight rows staged ahead]: with kAhead > 0 each step's input row is copied to shared
// memory kAhead steps ahead, as the forward windows stage theirs (Note [Windows stage rows ahead]
// in depthwise_windows.cuh), and made over from there. The dy rows load as before: staging the
// one new at each step as well took the block past the 48 KB of static shared memory with
// sum_block_rows' 17 KB, as the x rows alone do in f32, so f32 runs unstaged whatever kAhead
// says. The values, the products and their order are those of kAhead 0. Not yet measured: the
// library runs kWeightRowsAhead, and bench/window_stage_probe.cu times the others against it.
constexpr int kWeightRowsAhead = 0;

template <typename T, class In, int kAhead = kWeightRowsAhead>
__global__ void __launch_bounds__(kThreads, kAhead > 0 && is_16bit<T> ? 2 : 3)
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
      // Staged rows (Note [Weight rows staged ahead]), generic lambdas that kStages 0 never
      // instantiates: step ih's x row copied into ring slot `slot`, and made over by In from
      // there (zeros outside [0, col_end), as for_each_column gives them).
      constexpr int kStages = is_16bit<T> ? kAhead : 0;
      constexpr int kRing = kStages + 1;
      auto stage = [&](auto slot, int ih) {
        auto& xs = staged_slots<T, V, kCols, kRing, kThreads>();
        const int row = ((n * g.h + ih) * g.w) * g.c + c0;
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          const int col = interior ? col0 + j : min(max(col0 + j, 0), g.w - 1);
          __pipeline_memcpy_async(&xs[slot][j][threadIdx.x], x + row + col * g.c,
                                  sizeof(Pack<T, V>));
        }
        __pipeline_commit();  // one group a step: wait_prior counts groups
      };
      auto staged_x = [&](auto slot, float(&xr)[kCols][V]) {
        auto& xs = staged_slots<T, V, kCols, kRing, kThreads>();
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          const Pack<T, V> pk = xs[slot][j][threadIdx.x];
          float xv[V];
#pragma unroll
          for (int v = 0; v < V; ++v) xv[v] = to_f(pk.v[v]);
          in(xv);
          const bool inside =
              interior || static_cast<unsigned>(col0 + j) < static_cast<unsigned>(col_end);
#pragma unroll
          for (int v = 0; v < V; ++v) xr[j][v] = inside ? xv[v] : 0.0f;
        }
      };
      [[maybe_unused]] int slot = 0;  // the ring slot of this step's row
      if constexpr (kStages > 0) {
#pragma unroll
        for (int t = 0; t < kStages; ++t) {
          if (ih_begin + t < ih_end) {
            stage(t, ih_begin + t);
          } else {
            __pipeline_commit();
          }
        }
      }
#pragma unroll 1
      for (int ih = ih_begin; ih < ih_end; ++ih) {
        float xr[kCols][V];
        if constexpr (kStages == 0) {
          const int row = ((n * g.h + ih) * g.w) * g.c + c0;
          for_each_column<T, V, kCols>(x, row, col0, col_end, g.w, g.c, interior, in,
                                       [&](int j, const float(&xv)[V]) {
#pragma unroll
                                         for (int v = 0; v < V; ++v) xr[j][v] = xv[v];
                                       });
        } else {
          // step ih + kStages's row into the slot read out a step ago, then this step's
          const int ahead_slot = slot + kStages < kRing ? slot + kStages : slot + kStages - kRing;
          if (ih + kStages < ih_end) {
            stage(ahead_slot, ih + kStages);
          } else {
            __pipeline_commit();
          }
          __pipeline_wait_prior(kStages);
          staged_x(slot, xr);
        }
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
        if constexpr (kStages > 0) slot = slot + 1 < kRing ? slot + 1 : 0;
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

// Input rows an item of the weight gradient by rows walks: the image's rows split evenly into runs
// of at most 7. The former rule (as many rows as gave the resident blocks an item a thread, 2 to
// 16) mostly took 16: MobileNetV2's f16 step's 13 launches (batch 128, H200, ncu) take 0.57 ms at
// 7 rows against 0.68 ms by it. Swept over fixed row counts 2-56, the best of each launch would
// make 0.55 ms, and no launch was more than 7% slower at 7 than at its best.
int weight_rows_per_item(int64_t h) { return h < 1 ? 1 : static_cast<int>(even_run(h, 7)); }

// The weight gradient by input rows (Note [Weight gradients by input rows]): items of
// weight_rows_per_item rows and row splits such that the blocks the device holds at once have an
// item a thread, the partial sums capped as weight_row_splits caps them.
template <typename T, class In, int kAhead = kWeightRowsAhead>
void backward_weight_rows(const Context& ctx, cudaStream_t stream, const Conv2dShape& s,
                          const BnActInput& bn, const T* x, const T* dy, DType dw_dtype, void* dw) {
  constexpr int K = 3;
  const auto kernel = backward_weight_rows_kernel<T, In, kAhead>;
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

}  // namespace
}  // namespace frugal::kernels::cuda
