// The depthwise weight gradient (Note [Depthwise kernels] in depthwise_conv.h): the 3x3 at
// stride 1 by input rows, strips or single outputs otherwise; each block writes f32 partial sums
// of its row split, which finish_weight_gradient adds in a fixed order.
#include "kernels/cuda/depthwise_common.cuh"

namespace frugal::kernels::cuda {
namespace {

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
  // a whole strip inside the row: straight loads (Note [Interior strips] in depthwise_common.cuh)
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
