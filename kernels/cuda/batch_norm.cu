// Batch normalisation over NHWC rows [rows, C] on CUDA. Per-channel sums run in two stages: a
// partial kernel (16-byte channel packs x rows a block, float sums over a slice of rows, shifted
// by the first row for the variance) and a per-channel finish in double (batch_norm_finish.cuh);
// then an elementwise pass over packs.
// x/y/dx/dy are f32/f16/bf16, parameters and statistics are f32. An activation may follow the
// normalisation (Note [Batch norm with its activation] in kernels/batch_norm.h): forward applies
// it before the store, backward takes its derivative at u = bn(x) recomputed from the saved
// statistics with the forward's own expression, so that u matches the forward bit for bit.
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "kernels/batch_norm.h"
#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/batch_norm_finish.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/split_sums.cuh"

namespace frugal::kernels::cuda {
namespace {

// out[v] = p[c0 + v] for v < V (`fallback` everywhere when p is null): 16-byte loads when V
// divides into fours and p + c0 is 16-byte aligned (c0 is a multiple of V), else one by one.
// Per-channel numbers were loaded one float per element before; the packed loads keep the
// fused kernels as light on the load units as the plain ones.
template <int V>
__device__ __forceinline__ void load_channels(const float* p, int64_t c0, float (&out)[V],
                                              float fallback) {
  if (p == nullptr) {
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = fallback;
    return;
  }
  if constexpr (V % 4 == 0) {
    if ((reinterpret_cast<uintptr_t>(p + c0) & 15u) == 0) {
#pragma unroll
      for (int v = 0; v < V; v += 4) {
        const float4 f = *reinterpret_cast<const float4*>(p + c0 + v);
        out[v] = f.x, out[v + 1] = f.y, out[v + 2] = f.z, out[v + 3] = f.w;
      }
      return;
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = p[c0 + v];
}

// Where the gradient reaching bn's output comes from: dy, or act'(u) * dy with u = bn(x)
// recomputed from the saved statistics.
struct BnOutputGrad {
  Activation act = Activation::identity;
  const float* mean = nullptr;
  const float* invstd = nullptr;
  const float* gamma = nullptr;  // nullable: 1
  const float* beta = nullptr;   // nullable: 0
};

// BnOutputGrad for the V channels from c0, held in registers, with g.act == A. u is the
// forward's expression, (x - mean) * (invstd * gamma) + beta in float, so it equals the forward's
// u bit for bit.
template <int V, Activation A>
struct OutputGradPack {
  float mean[V], scale[V], shift[V];
  __device__ __forceinline__ OutputGradPack(const BnOutputGrad& g, int64_t c0) {
    load_channels<V>(g.mean, c0, mean, 0.0f);
    if constexpr (A == Activation::identity) return;
    float gm[V];
    load_channels<V>(g.invstd, c0, scale, 1.0f);
    load_channels<V>(g.gamma, c0, gm, 1.0f);
    load_channels<V>(g.beta, c0, shift, 0.0f);
#pragma unroll
    for (int v = 0; v < V; ++v) scale[v] *= gm[v];
  }
  __device__ __forceinline__ float operator()(int v, float x, float dy) const {
    if constexpr (A == Activation::identity) return dy;
    return act_backward<A>((x - mean[v]) * scale[v] + shift[v], dy);
  }
};

// Note [Batch norm's activation at compile time]
// The passes that apply the activation (normalize) or its derivative (the backward sums and dx)
// take it as a template argument A (with_activation in activation.cuh). Chosen at run time, its
// switch sat between the loads of the unrolled rows, which the compiler then could not issue
// together; the same switch in the depthwise strips' loads cost 2.5x (Note [Batch norm inside the
// depthwise convolution] in kernels/conv.h).

// Note [Sums downward, elementwise upward]
// The sums pass walks its rows from the last to the first, and the elementwise pass after it
// (normalize, dx) from the first to the last: each pass starts on the rows its predecessor
// touched last, which may still be in L2. The producers of x and dy (GEMMs, elementwise kernels)
// write upward, so the sums pass meets their last rows first, and the elementwise pass meets the
// sums pass's.

// Channel packs (pack_width in cuda_common.cuh): 16-byte loads when C divides into them (every
// MobileNet width does), else one channel per thread. 16-bit rows were load-latency bound with
// one 2-byte channel per thread.

// One block: `lanes` consecutive channel packs x (kThreads / lanes) rows, rows strided over the
// splits (blockIdx.y). Sums per channel
//   forward:  a = x - x[0, c], b = (x - x[0, c])^2
//   backward: a = dy,          b = dy * (x - mean[c])
// and writes partial[(split * C + c) * 2 + {0, 1}].
template <typename T, bool kBackward, int V, Activation A>
__global__ void channel_partial_kernel(int64_t rows, int64_t c, int lanes, const T* x, const T* dy,
                                       BnOutputGrad out_grad, float* partial) {
  const int64_t cvs = c / V;
  const int block_rows = kThreads / lanes;
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const int r = static_cast<int>(threadIdx.x) / lanes;
  const int64_t cv = static_cast<int64_t>(blockIdx.x) * lanes + lane;
  const bool active = r < block_rows && cv < cvs;
  float a[V], b[V];
#pragma unroll
  for (int v = 0; v < V; ++v) a[v] = b[v] = 0.0f;
  if (active) {
    const int64_t c0 = cv * V;
    float center[V];
    // The channels of a thread are fixed: their numbers are loaded once, before the rows.
    const OutputGradPack<V, A> grad_of(out_grad, c0);
    if (kBackward) {
#pragma unroll
      for (int v = 0; v < V; ++v) center[v] = grad_of.mean[v];
    } else {
      Pack<T, V> first = load_pack<T, V>(x + c0);
#pragma unroll
      for (int v = 0; v < V; ++v) center[v] = to_f(first.v[v]);
    }
    const int64_t step = static_cast<int64_t>(gridDim.y) * block_rows;
    // From the last of this thread's rows down (Note [Sums downward, elementwise upward]); the
    // first row is below step, so the walk ends below 0. Unrolled so that the loads of several
    // rows are in flight at once, as in the elementwise passes (the sums only add, so the loads
    // need not wait for them).
    const int64_t first = static_cast<int64_t>(blockIdx.y) * block_rows + r;
    const int64_t last = first < rows ? first + (rows - 1 - first) / step * step : -1;
#pragma unroll 4
    for (int64_t row = last; row >= 0; row -= step) {
      Pack<T, V> xv = load_pack<T, V>(x + row * c + c0);
      if (kBackward) {
        Pack<T, V> gv = load_pack<T, V>(dy + row * c + c0);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          float g = grad_of(v, to_f(xv.v[v]), to_f(gv.v[v]));
          a[v] += g;
          b[v] += g * (to_f(xv.v[v]) - center[v]);
        }
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          float d = to_f(xv.v[v]) - center[v];
          a[v] += d;
          b[v] += d * d;
        }
      }
    }
  }
  // Sum over the block's rows (Note [Block row sums]); m = moment * V + v.
  float sums[2 * V];
#pragma unroll
  for (int v = 0; v < V; ++v) sums[v] = a[v], sums[V + v] = b[v];
  const int64_t cv0 = static_cast<int64_t>(blockIdx.x) * lanes;
  sum_block_rows(sums, lanes, block_rows, [&](int l, int m, float sum) {
    const int64_t col = cv0 + l;
    if (col < cvs) {
      partial[(static_cast<int64_t>(blockIdx.y) * c + col * V + m % V) * 2 + m / V] = sum;
    }
  });
}

// Note [Row-major elementwise passes]
// The elementwise passes (normalize, dx) run on a grid of channel packs x rows: each thread keeps
// one pack of V channels, loads its per-channel numbers once and strides over rows. A 1-D
// grid-stride loop over packs instead found each pack's channel by a 64-bit modulo and reloaded
// up to seven per-channel arrays per pack: 0.97 ms (normalize) and 0.85 ms (dx) of ResNet-18's
// f16 step on the H200, where cuDNN's whole forward and backward kernels, statistics included,
// take 0.62 and 0.85 ms in PyTorch's (0.68 and 0.73 ms since).
struct RowGrid {
  int lanes;       // channel packs a block covers
  int block_rows;  // rows a block covers at a time
  dim3 grid, block;
};

// Row-pass geometry for `kernel` (a normalize or dx instantiation).
template <typename Kernel>
RowGrid row_grid(const Context& ctx, Kernel* kernel, int64_t rows, int64_t c, int v) {
  const int64_t cvs = c / v;
  const int lanes = static_cast<int>(std::min<int64_t>(cvs, kThreads));
  const int block_rows = kThreads / lanes;
  const int threads = (lanes * block_rows + 31) / 32 * 32;  // no warp without work
  const int64_t blocks_x = (cvs + lanes - 1) / lanes;
  // one wave (Note [Grids by occupancy] in cuda_common.cuh)
  const int64_t fill = resident_fill(ctx, kernel, threads);
  const int64_t by_rows = (rows + block_rows - 1) / block_rows;
  const int64_t splits = std::max<int64_t>(
      1, std::min<int64_t>({by_rows, fill / std::max<int64_t>(blocks_x, 1), 65535}));
  return {lanes, block_rows, dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits)),
          dim3(static_cast<unsigned>(threads))};
}

// This thread's channel pack (cv < c / V when active) and first row; rows advance by `step`.
struct RowLane {
  int64_t cv, row, step;
  bool active;
  __device__ __forceinline__ RowLane(int64_t c, int v, int lanes, int block_rows) {
    const int lane = static_cast<int>(threadIdx.x) % lanes;
    const int r = static_cast<int>(threadIdx.x) / lanes;
    cv = static_cast<int64_t>(blockIdx.x) * lanes + lane;
    row = static_cast<int64_t>(blockIdx.y) * block_rows + r;
    step = static_cast<int64_t>(gridDim.y) * block_rows;
    active = r < block_rows && cv < c / v;
  }
};

// y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c]; invstd comes from `var` + eps when
// `var` is given (evaluation), else from `invstd`. gamma/beta may be null (1 and 0). C % V == 0.
// kResidual: y = residual + that value rounded to T (Note [Residual sums of deferred batch norms]
// in nn/batch_norm_deferred.h), the sum an add of the stored output would give.
template <typename T, int V, Activation A, bool kResidual = false>
__global__ void normalize_kernel(int64_t rows, int64_t c, int lanes, int block_rows,
                                 const T* __restrict__ x, const float* mean, const float* invstd,
                                 const float* var, float eps, const float* gamma, const float* beta,
                                 const T* __restrict__ residual, T* __restrict__ y) {
  const RowLane at(c, V, lanes, block_rows);
  if (!at.active) return;
  const int64_t c0 = at.cv * V;
  float mu[V], scale[V], b[V], g[V];
  load_channels<V>(mean, c0, mu, 0.0f);
  load_channels<V>(var != nullptr ? var : invstd, c0, scale, 1.0f);
  load_channels<V>(gamma, c0, g, 1.0f);
  load_channels<V>(beta, c0, b, 0.0f);
#pragma unroll
  for (int v = 0; v < V; ++v) {
    if (var != nullptr) scale[v] = rsqrtf(scale[v] + eps);
    scale[v] *= g[v];  // the forward's (invstd * gamma), as the backward recomputes it
  }
#pragma unroll 4
  for (int64_t row = at.row; row < rows; row += at.step) {
    const Pack<T, V> xv = load_pack<T, V>(x + row * c + c0);
    Pack<T, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v)
      out.v[v] = from_f<T>(act_forward<A>((to_f(xv.v[v]) - mu[v]) * scale[v] + b[v]));
    if constexpr (kResidual) {
      const Pack<T, V> rv = load_pack<T, V>(residual + row * c + c0);
      // __fadd_rn: in f32 a plain + let the compiler fold the activation's last multiply into an
      // FMA with the add (SiLU's sums differed from the unfused ones in the last bit).
#pragma unroll
      for (int v = 0; v < V; ++v) out.v[v] = from_f<T>(__fadd_rn(to_f(rv.v[v]), to_f(out.v[v])));
    }
    *reinterpret_cast<Pack<T, V>*>(y + row * c + c0) = out;
  }
}

// dx = k1 * (g - k2 - (x - mean) * k3), g the gradient at bn's output (BnOutputGrad). Rows x
// channel packs (Note [Row-major elementwise passes]).
template <typename T, int V, Activation A>
__global__ void backward_dx_kernel(int64_t rows, int64_t c, int lanes, int block_rows,
                                   const T* __restrict__ x, const T* __restrict__ dy,
                                   BnOutputGrad out_grad, const float* coef, T* __restrict__ dx) {
  const RowLane at(c, V, lanes, block_rows);
  if (!at.active) return;
  const int64_t c0 = at.cv * V;
  const OutputGradPack<V, A> grad_of(out_grad, c0);
  float k1[V], k2[V], k3[V];
  load_channels<V>(coef, c0, k1, 0.0f);
  load_channels<V>(coef + c, c0, k2, 0.0f);
  load_channels<V>(coef + 2 * c, c0, k3, 0.0f);
#pragma unroll 4
  for (int64_t row = at.row; row < rows; row += at.step) {
    const Pack<T, V> xv = load_pack<T, V>(x + row * c + c0);
    const Pack<T, V> gv = load_pack<T, V>(dy + row * c + c0);
    Pack<T, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float xf = to_f(xv.v[v]);
      float r = k1[v] * (grad_of(v, xf, to_f(gv.v[v])) - k2[v] - (xf - grad_of.mean[v]) * k3[v]);
      out.v[v] = from_f<T>(r);
    }
    *reinterpret_cast<Pack<T, V>*>(dx + row * c + c0) = out;
  }
}

// Splits of the row range: as many as fill the device's resident blocks once (Note [Grids by
// occupancy]), while each thread still sums a run of at least kRowsPerThread rows. With 32 rows a
// thread, a 32-channel f16 input of 65,536 rows got 32 blocks on 132 SMs, each thread waiting on
// its loads one after another.
constexpr int64_t kRowsPerThread = 8;

// Launch geometry of the partial kernel for C channels in packs of V. A block's column is at most
// kThreads channels (32 packs of 8 16-bit channels), wider inputs take several columns of equal
// width and each fewer splits: MobileNetV2 f16 replayed at 13,466 img/s so (its 384-1280-channel
// layers), 13,037 with one column of up to kThreads packs (H200, two calls of one session).
// `fills`: the splits reach the device's resident blocks (Note [Grids by occupancy] in
// cuda_common.cuh), not the rows' limit.
struct PartialGrid {
  int lanes;
  int splits;
  dim3 grid;
  bool fills;
};

template <typename T, bool kBackward, int V, Activation A>
PartialGrid partial_grid(const Context& ctx, int64_t rows, int64_t c) {
  const int64_t cvs = c / V;
  const int64_t blocks_x = std::max<int64_t>((cvs + kThreads / V - 1) / (kThreads / V), 1);
  const int lanes = static_cast<int>(std::max<int64_t>((cvs + blocks_x - 1) / blocks_x, 1));
  const int block_rows = kThreads / lanes;
  const auto kernel = channel_partial_kernel<T, kBackward, V, A>;
  const int64_t by_fill = resident_fill(ctx, kernel, kThreads) / blocks_x;
  const int64_t by_rows =
      (rows + int64_t{block_rows} * kRowsPerThread - 1) / (int64_t{block_rows} * kRowsPerThread);
  const int splits =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({by_fill, by_rows, 1024})));
  return {lanes, splits, dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(splits)),
          by_rows >= by_fill};
}

// Note [Narrow packs for small reductions]: with 16-bit packs of 8 channels a small input gives
// half the threads f32's packs of 4 give, and its sums wait on load latency, not bandwidth (f16
// partials took 0.78 ms against f32's 0.63 ms in MobileNetV2's step at 32x32, H200). When the
// wide grid would not fill the device, the partial kernel takes 4 channels (8 bytes) a thread
// instead; large inputs keep the 16-byte loads that bandwidth wants (narrow packs cost about 5%
// of the f16 step at 224x224).
template <int V>
constexpr int kNarrowPack = V > 4 ? 4 : V;

// The partial-sum pass with its pack width chosen: its grid sizes the partial buffer before the
// launch, hence two steps.
struct PartialPlan {
  bool narrow;
  PartialGrid pg;
};

template <typename T, bool kBackward, int V, Activation A>
PartialPlan plan_partials(const Context& ctx, int64_t rows, int64_t c) {
  const PartialGrid wide = partial_grid<T, kBackward, V, A>(ctx, rows, c);
  if (V <= 4 || wide.fills) return {false, wide};
  return {true, partial_grid<T, kBackward, kNarrowPack<V>, A>(ctx, rows, c)};
}

// A pass's workspace: the partial rows [splits, C, 2] and `extra` floats for the caller.
struct SumsWorkspace {
  memory::DataPtr ws;
  float* partial;
  float* extra;
};

SumsWorkspace sums_workspace(const Context& ctx, const PartialGrid& pg, int64_t c, int64_t extra) {
  memory::DataPtr ws = ctx.workspace(
      (static_cast<size_t>(pg.splits) * c * 2 + static_cast<size_t>(extra)) * sizeof(float));
  auto partial = static_cast<float*>(ws.get());
  return {std::move(ws), partial, partial + static_cast<int64_t>(pg.splits) * c * 2};
}

// The sums and their finish (Note [Finishes as kernels of their own] in batch_norm_finish.cuh).
// dy and out_grad's pointers are null in the forward pass (kBackward false, A identity); Finish
// is ForwardFinish<T> or BackwardFinish to match.
template <typename T, bool kBackward, int V, Activation A, class Finish>
void sum_and_finish(const PartialPlan& plan, const SumsWorkspace& w, cudaStream_t s, int64_t rows,
                    int64_t c, const T* x, const T* dy, const BnOutputGrad& out_grad,
                    const Finish& finish) {
  const PartialGrid& pg = plan.pg;
  if (plan.narrow) {
    channel_partial_kernel<T, kBackward, kNarrowPack<V>, A>
        <<<pg.grid, kThreads, 0, s>>>(rows, c, pg.lanes, x, dy, out_grad, w.partial);
  } else {
    channel_partial_kernel<T, kBackward, V, A>
        <<<pg.grid, kThreads, 0, s>>>(rows, c, pg.lanes, x, dy, out_grad, w.partial);
  }
  FRUGAL_LAUNCH_CHECK();
  constexpr int kWarps = kThreads / 32;
  finish_kernel<<<static_cast<unsigned>((c + kWarps - 1) / kWarps), kThreads, 0, s>>>(
      c, pg.splits, w.partial, finish);
  FRUGAL_LAUNCH_CHECK();
}

void check_common(const Context& ctx, DType dtype, int64_t rows, int64_t c, const char* op) {
  stream_of(ctx, op);
  FRUGAL_CHECK(dtype != DType::f64, op, ": f64 is CPU-only");
  FRUGAL_CHECK(rows >= 0 && c >= 0 && (c + 31) / 32 <= INT32_MAX, op, ": bad shape [", rows, ", ",
               c, "]");
}

// The elementwise pass alone, from given statistics: mean and invstd (a recompute) or mean and
// var + eps (evaluation).
// residual (nullable): y = residual + the normalized value (normalize_kernel's kResidual).
void launch_normalize(const Context& ctx, DType dtype, const char* op, int64_t rows, int64_t c,
                      const void* x, const void* mean, const void* invstd, const void* var,
                      double eps, const void* gamma, const void* beta, Activation act,
                      const void* residual, void* y) {
  check_common(ctx, dtype, rows, c, op);
  if (rows == 0 || c == 0) return;
  DeviceGuard guard(ctx.device);
  cudaStream_t s = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    with_pack_width<T>(c, {x, y, residual}, [&](auto pack) {
      constexpr int V = decltype(pack)::value;
      with_activation(act, [&](auto a) {
        auto launch = [&](auto kernel) {
          const RowGrid rg = row_grid(ctx, kernel, rows, c, V);
          kernel<<<rg.grid, rg.block, 0, s>>>(
              rows, c, rg.lanes, rg.block_rows, static_cast<const T*>(x),
              static_cast<const float*>(mean), static_cast<const float*>(invstd),
              static_cast<const float*>(var), static_cast<float>(eps),
              static_cast<const float*>(gamma), static_cast<const float*>(beta),
              static_cast<const T*>(residual), static_cast<T*>(y));
        };
        if (residual != nullptr) {
          launch(normalize_kernel<T, V, decltype(a)::value, true>);
        } else {
          launch(normalize_kernel<T, V, decltype(a)::value>);
        }
      });
      FRUGAL_LAUNCH_CHECK();
    });
  });
}

}  // namespace

void batch_norm_act_forward_train(const Context& ctx, DType dtype, Activation act, int64_t rows,
                                  int64_t c, const void* x, const void* gamma, const void* beta,
                                  double eps, double momentum, void* y, void* save_mean,
                                  void* save_invstd, void* running_mean, void* running_var,
                                  int64_t* batches_tracked) {
  const char* op = "batch_norm_forward_train";
  check_common(ctx, dtype, rows, c, op);
  if (c == 0) return;
  FRUGAL_CHECK(rows > 1, op, ": need more than one value per channel in training, got [", rows,
               ", ", c, "]");
  DeviceGuard guard(ctx.device);
  cudaStream_t s = stream_of(ctx, op);
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    auto xt = static_cast<const T*>(x);
    with_pack_width<T>(c, {x, y}, [&](auto pack) {
      constexpr int V = decltype(pack)::value;
      const PartialPlan plan = plan_partials<T, false, V, Activation::identity>(ctx, rows, c);
      // room for mean and invstd [2, C] after the partial sums when the caller saves none
      const SumsWorkspace w = sums_workspace(ctx, plan.pg, c, 2 * c);
      auto mean = save_mean != nullptr ? static_cast<float*>(save_mean) : w.extra;
      auto invstd = save_invstd != nullptr ? static_cast<float*>(save_invstd) : w.extra + c;
      const ForwardFinish<T> finish{rows,
                                    xt,
                                    eps,
                                    momentum,
                                    mean,
                                    invstd,
                                    static_cast<float*>(running_mean),
                                    static_cast<float*>(running_var),
                                    batches_tracked};
      sum_and_finish<T, false, V, Activation::identity>(plan, w, s, rows, c, xt, nullptr,
                                                        BnOutputGrad{}, finish);
      // statistics only without y: batch_norm_act_apply writes it later
      if (y != nullptr) {
        launch_normalize(ctx, dtype, op, rows, c, x, mean, invstd, nullptr, 0.0, gamma, beta, act,
                         nullptr, y);
      }
    });
  });
}

void batch_norm_forward_train(const Context& ctx, DType dtype, int64_t rows, int64_t c,
                              const void* x, const void* gamma, const void* beta, double eps,
                              double momentum, void* y, void* save_mean, void* save_invstd,
                              void* running_mean, void* running_var) {
  cuda::batch_norm_act_forward_train(ctx, dtype, Activation::identity, rows, c, x, gamma, beta, eps,
                                     momentum, y, save_mean, save_invstd, running_mean, running_var,
                                     nullptr);
}

void batch_norm_act_apply(const Context& ctx, DType dtype, Activation act, int64_t rows, int64_t c,
                          const void* x, const void* gamma, const void* beta, const void* mean,
                          const void* invstd, void* y) {
  launch_normalize(ctx, dtype, "batch_norm_act_apply", rows, c, x, mean, invstd, nullptr, 0.0,
                   gamma, beta, act, nullptr, y);
}

void batch_norm_act_apply_add(const Context& ctx, DType dtype, Activation act, int64_t rows,
                              int64_t c, const void* x, const void* gamma, const void* beta,
                              const void* mean, const void* invstd, const void* residual, void* y) {
  launch_normalize(ctx, dtype, "batch_norm_act_apply_add", rows, c, x, mean, invstd, nullptr, 0.0,
                   gamma, beta, act, residual, y);
}

void batch_norm_forward_eval(const Context& ctx, DType dtype, int64_t rows, int64_t c,
                             const void* x, const void* gamma, const void* beta,
                             const void* running_mean, const void* running_var, double eps,
                             void* y) {
  launch_normalize(ctx, dtype, "batch_norm_forward_eval", rows, c, x, running_mean, nullptr,
                   running_var, eps, gamma, beta, Activation::identity, nullptr, y);
}

void batch_norm_act_backward(const Context& ctx, DType dtype, Activation act, int64_t rows,
                             int64_t c, const void* x, const void* dy, const void* gamma,
                             const void* beta, const void* save_mean, const void* save_invstd,
                             void* dx, void* dgamma, void* dbeta) {
  const char* op = "batch_norm_backward";
  check_common(ctx, dtype, rows, c, op);
  if (c == 0) return;
  DeviceGuard guard(ctx.device);
  cudaStream_t s = stream_of(ctx, op);
  const BnOutputGrad out_grad{act, static_cast<const float*>(save_mean),
                              static_cast<const float*>(save_invstd),
                              static_cast<const float*>(gamma), static_cast<const float*>(beta)};
  FRUGAL_CUDA_FLOAT_SWITCH(dtype, op, {
    auto xt = static_cast<const T*>(x);
    auto dyt = static_cast<const T*>(dy);
    with_pack_width<T>(c, {x, dy, dx}, [&](auto pack) {
      with_activation(act, [&](auto a) {
        constexpr int V = decltype(pack)::value;
        constexpr Activation A = decltype(a)::value;
        const PartialPlan plan = plan_partials<T, true, V, A>(ctx, rows, c);
        const SumsWorkspace w = sums_workspace(ctx, plan.pg, c, 3 * c);
        float* coef = w.extra;  // [3, C]
        const BackwardFinish finish{rows,
                                    c,
                                    static_cast<const float*>(gamma),
                                    static_cast<const float*>(save_invstd),
                                    static_cast<float*>(dgamma),
                                    static_cast<float*>(dbeta),
                                    coef};
        sum_and_finish<T, true, V, A>(plan, w, s, rows, c, xt, dyt, out_grad, finish);
        if (dx != nullptr && rows > 0) {
          const auto kernel = backward_dx_kernel<T, V, A>;
          const RowGrid rg = row_grid(ctx, kernel, rows, c, V);
          kernel<<<rg.grid, rg.block, 0, s>>>(rows, c, rg.lanes, rg.block_rows, xt, dyt, out_grad,
                                              coef, static_cast<T*>(dx));
          FRUGAL_LAUNCH_CHECK();
        }
      });
    });
  });
}

void batch_norm_backward(const Context& ctx, DType dtype, int64_t rows, int64_t c, const void* x,
                         const void* dy, const void* gamma, const void* save_mean,
                         const void* save_invstd, void* dx, void* dgamma, void* dbeta) {
  cuda::batch_norm_act_backward(ctx, dtype, Activation::identity, rows, c, x, dy, gamma, nullptr,
                                save_mean, save_invstd, dx, dgamma, dbeta);
}

}  // namespace frugal::kernels::cuda
