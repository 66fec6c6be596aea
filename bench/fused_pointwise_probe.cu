// Can a 1x1 convolution that normalizes its input as it loads it, and sums the channel statistics
// batch norm needs as it stores its output, beat today's separate passes? The question behind
// issue 16's HBM goal (bench/RESULTS.md, "What the HBM goal asks"): batch norm's normalize and
// statistics passes take 3-4 ms of MobileNetV2's f16 step, and they exist because cuBLAS's GEMMs
// can neither apply the previous batch norm to their input nor sum their output. A standalone
// CUDA program, not linked with frugal; `build-gpu/fused_pointwise_probe` prints a line per shape
// and direction and exits 1 on a wrong result. The kernels are in pointwise_probe_kernels.cuh.
//
// For each 1x1 convolution z = f(x) w^T of MobileNetV2 (f16, batch 128, 224x224; rows = N*H*W
// pixels of NHWC, k input and n output channels; f the previous batch norm, with ReLU6 before a
// projection, alone before an expansion):
// - forward, today: a = f(x) written out, cuBLAS z = a w^T, z read again for its channels' sums
//   and sums of squares; fused: one kernel that applies f as it loads x, writes z and the sums.
// - backward from g = dL/dz, today: a = f(x) recomputed, cuBLAS dw = g^T a and da = g w, then da
//   and x read again for the previous batch norm's sums (dy = da where the ReLU6 passes, dy and
//   dy * x); fused: dw from a kernel that applies f as it loads x (and a sum of its row splits),
//   and da from one that reads x in its epilogue and sums dy and dy * x there.
// Both forms write the same outputs; each sums the partials in the same finish kernel. Times are
// medians over replayed CUDA graphs that rotate among enough input sets to keep the working set
// above twice the 50 MB L2. Left out: the residual sums some expansions read (a block's output is
// stored for its skip, so there the fused forward saves the sums pass alone), and batch norm's
// own elementwise passes.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "mobilenet_v2_pointwise.h"
#include "pointwise_probe_kernels.cuh"
#include "probe_common.cuh"

namespace {

using namespace pointwise_probe;

using probe::check;
using probe::device_copy;
using Shape = probe::PointwiseShape;

constexpr int kBlocksAtOnce = 3 * 132;  // three 256-thread blocks on each of the H200's 132 SMs

struct Buffers {  // one input set, and what both forms write from it
  __half *x, *a, *z, *g, *da;
  float *part_first, *part_second, *first, *second, *dw, *dw_part;
};

struct Layer {
  Shape shape;
  __half* w;
  float *scale, *shift;
  std::vector<Buffers> sets;
  // Partial rows of the channel sums, the same in both forms: one per block, at most 8 blocks
  // for each multiprocessor, each striding over the 128-row tiles.
  long parts() const {
    return std::min<long>((shape.rows + kRowsPerBlock - 1) / kRowsPerBlock, 8 * 132);
  }
  int grad_tiles() const {
    return ((shape.n + kGradTile - 1) / kGradTile) * ((shape.k + kGradTile - 1) / kGradTile);
  }
  // Row splits of the fused weight gradient: about three waves of blocks.
  int splits() const {
    const long steps = (shape.rows + kGradRows - 1) / kGradRows;
    return static_cast<int>(std::clamp<long>(3L * kBlocksAtOnce / grad_tiles(), 1, steps));
  }
};

// Tile columns of the fused GEMMs: the widest of 64, 32 and 16 the width needs, narrowed
// while the grid is under two waves (the 14x14 and 7x7 layers have few 128-row tiles).
int columns_for(const Layer& l, int width) {
  int cols = width <= 16 ? 16 : width <= 32 ? 32 : 64;
  while (cols > 16 && long{(width + cols - 1) / cols} * l.parts() < 2L * kBlocksAtOnce) cols /= 2;
  return cols;
}

// out[rows][width] = a_src w^T or a_src w, with its sums (pointwise_probe::fused_gemm_kernel).
template <Sums kSums>
void launch_fused_gemm(const Layer& l, const __half* a_src, const __half* x, __half* out,
                       const Buffers& b, int depth, int width, cudaStream_t s) {
  const int cols = columns_for(l, width);
  const dim3 grid((width + cols - 1) / cols, static_cast<unsigned>(l.parts()));
  const Shape& sh = l.shape;
  auto launch = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, s>>>(a_src, l.w, x, l.scale, l.shift, sh.relu6, out, b.part_first,
                                     b.part_second, sh.rows, depth, width);
  };
  if (cols == 16) {
    launch(fused_gemm_kernel<16, kSums>);
  } else if (cols == 32) {
    launch(fused_gemm_kernel<32, kSums>);
  } else {
    launch(fused_gemm_kernel<64, kSums>);
  }
  check(cudaGetLastError(), "fused GEMM launch");
}

void launch_finish(const Layer& l, const Buffers& b, int width, cudaStream_t s) {
  finish_kernel<<<(width + 31) / 32, kThreads, 0, s>>>(
      b.part_first, b.part_second, static_cast<int>(l.parts()), width, b.first, b.second);
  check(cudaGetLastError(), "finish launch");
}

void launch_normalize(const Layer& l, const Buffers& b, cudaStream_t s) {
  const long vectors = l.shape.rows * l.shape.k / 8;
  normalize_kernel<<<static_cast<int>(std::min<long>((vectors + kThreads - 1) / kThreads, 8 * 132)),
                     kThreads, 0, s>>>(b.x, l.scale, l.shift, b.a, vectors, l.shape.k,
                                       l.shape.relu6);
  check(cudaGetLastError(), "normalize launch");
}

// cuBLAS is column-major: a row-major [r][c] matrix is its c x r. So z^T = w a^T (forward),
// dw^T = a^T g (k x n, f32) and da^T = w^T g^T (k x rows).
void forward_gemm(const Layer& l, const Buffers& b, cublasHandle_t blas) {
  const Shape& sh = l.shape;
  const float one = 1.0f, zero = 0.0f;
  check(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, static_cast<int>(sh.rows), sh.k, &one,
                     l.w, CUDA_R_16F, sh.k, b.a, CUDA_R_16F, sh.k, &zero, b.z, CUDA_R_16F, sh.n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "forward cublasGemmEx");
}

void backward_gemms(const Layer& l, const Buffers& b, cublasHandle_t blas) {
  const Shape& sh = l.shape;
  const float one = 1.0f, zero = 0.0f;
  check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, sh.k, sh.n, static_cast<int>(sh.rows), &one,
                     b.a, CUDA_R_16F, sh.k, b.g, CUDA_R_16F, sh.n, &zero, b.dw, CUDA_R_32F, sh.k,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "weight gradient cublasGemmEx");
  check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, sh.k, static_cast<int>(sh.rows), sh.n, &one,
                     l.w, CUDA_R_16F, sh.k, b.g, CUDA_R_16F, sh.n, &zero, b.da, CUDA_R_16F, sh.k,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "input gradient cublasGemmEx");
}

void forward_passes(const Layer& l, const Buffers& b, cublasHandle_t blas, cudaStream_t s) {
  launch_normalize(l, b, s);
  forward_gemm(l, b, blas);
  channel_sums_kernel<Sums::output><<<static_cast<int>(l.parts()), kThreads, 0, s>>>(
      b.z, nullptr, nullptr, nullptr, false, l.shape.rows, l.shape.n, b.part_first, b.part_second);
  check(cudaGetLastError(), "sums launch");
  launch_finish(l, b, l.shape.n, s);
}

void forward_fused(const Layer& l, const Buffers& b, cudaStream_t s) {
  launch_fused_gemm<Sums::output>(l, b.x, nullptr, b.z, b, l.shape.k, l.shape.n, s);
  launch_finish(l, b, l.shape.n, s);
}

void backward_passes(const Layer& l, const Buffers& b, cublasHandle_t blas, cudaStream_t s) {
  launch_normalize(l, b, s);
  backward_gemms(l, b, blas);
  channel_sums_kernel<Sums::input_gradient><<<static_cast<int>(l.parts()), kThreads, 0, s>>>(
      b.da, b.x, l.scale, l.shift, l.shape.relu6, l.shape.rows, l.shape.k, b.part_first,
      b.part_second);
  check(cudaGetLastError(), "sums launch");
  launch_finish(l, b, l.shape.k, s);
}

void backward_fused(const Layer& l, const Buffers& b, cudaStream_t s) {
  const Shape& sh = l.shape;
  const dim3 grid((sh.k + kGradTile - 1) / kGradTile, (sh.n + kGradTile - 1) / kGradTile,
                  l.splits());
  fused_weight_gradient_kernel<<<grid, kThreads, 0, s>>>(b.g, b.x, l.scale, l.shift, sh.relu6,
                                                         sh.rows, sh.n, sh.k, b.dw_part);
  check(cudaGetLastError(), "weight gradient launch");
  const long count = long{sh.n} * sh.k;
  reduce_splits_kernel<<<static_cast<int>(
                             std::min<long>((count + kThreads - 1) / kThreads, 8 * 132)),
                         kThreads, 0, s>>>(b.dw_part, l.splits(), count, b.dw);
  check(cudaGetLastError(), "reduce launch");
  launch_fused_gemm<Sums::input_gradient>(l, b.g, b.x, b.da, b, sh.n, sh.k, s);
  launch_finish(l, b, sh.k, s);
}

template <typename T>
std::vector<T> host_copy(const T* d, size_t count) {
  std::vector<T> host(count);
  check(cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return host;
}

template <typename T>
T* device_alloc(size_t count) {
  T* d;
  check(cudaMalloc(&d, count * sizeof(T)), "malloc");
  return d;
}

// N(0, 1) values in f16: 1 MiB runs copied from random places in a pool of 16 M draws, which is
// fast enough to fill the probe's 2 G inputs inside a device call.
std::vector<__half> random_halves(size_t count, std::mt19937& rng) {
  static const std::vector<__half> pool = [] {
    std::mt19937 seed(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<__half> p(size_t{1} << 24);
    for (auto& e : p) e = __float2half(normal(seed));
    return p;
  }();
  constexpr size_t kRun = size_t{1} << 19;
  std::vector<__half> v(count);
  for (size_t at = 0; at < count; at += kRun) {
    const size_t n = std::min(kRun, count - at), from = rng() % (pool.size() - kRun);
    std::copy_n(pool.begin() + static_cast<long>(from), n, v.begin() + static_cast<long>(at));
  }
  return v;
}

Layer make_layer(const Shape& sh, std::mt19937& rng) {
  Layer l{sh};
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<__half> w(static_cast<size_t>(sh.n) * sh.k);
  for (auto& v : w) v = __float2half(uniform(rng) / std::sqrt(float(sh.k)));
  std::vector<float> scale(sh.k), shift(sh.k);
  for (int c = 0; c < sh.k; ++c) {
    scale[c] = 1.0f + 0.5f * uniform(rng);
    shift[c] = 0.5f * uniform(rng);
  }
  l.w = device_copy(w);
  l.scale = device_copy(scale);
  l.shift = device_copy(shift);
  // Enough sets that one round of them is over twice the L2 (50 MB on the H200).
  const double set_bytes = 2.0 * sh.rows * (3.0 * sh.k + 2.0 * sh.n);
  const int sets = static_cast<int>(std::clamp(std::ceil(100e6 / set_bytes), 1.0, 16.0));
  const size_t xs = static_cast<size_t>(sh.rows) * sh.k, zs = static_cast<size_t>(sh.rows) * sh.n;
  const size_t widest = std::max(sh.n, sh.k), weights = static_cast<size_t>(sh.n) * sh.k;
  for (int i = 0; i < sets; ++i) {
    Buffers b;
    b.x = device_copy(random_halves(xs, rng));
    b.g = device_copy(random_halves(zs, rng));
    b.a = device_alloc<__half>(xs);
    b.da = device_alloc<__half>(xs);
    b.z = device_alloc<__half>(zs);
    b.part_first = device_alloc<float>(l.parts() * widest);
    b.part_second = device_alloc<float>(l.parts() * widest);
    b.first = device_alloc<float>(widest);
    b.second = device_alloc<float>(widest);
    b.dw = device_alloc<float>(weights);
    b.dw_part = device_alloc<float>(l.splits() * weights);
    l.sets.push_back(b);
  }
  return l;
}

void free_layer(Layer& l) {
  for (Buffers& b : l.sets) {
    for (void* p :
         {static_cast<void*>(b.x), static_cast<void*>(b.a), static_cast<void*>(b.z),
          static_cast<void*>(b.g), static_cast<void*>(b.da), static_cast<void*>(b.part_first),
          static_cast<void*>(b.part_second), static_cast<void*>(b.first),
          static_cast<void*>(b.second), static_cast<void*>(b.dw), static_cast<void*>(b.dw_part)}) {
      check(cudaFree(p), "free");
    }
  }
  for (void* p :
       {static_cast<void*>(l.w), static_cast<void*>(l.scale), static_cast<void*>(l.shift)}) {
    check(cudaFree(p), "free");
  }
}

// ||got - ref|| / ||ref||, accumulated; infinite once a NaN (an unwritten output) is seen.
struct Relative {
  double num = 0, den = 0;
  void add(double got, double ref) {
    num += (got - ref) * (got - ref);
    den += ref * ref;
  }
  double value() const { return std::isfinite(num) ? std::sqrt(num / den) : INFINITY; }
};

struct Errors {
  double out = 0, first = 0, second = 0, dw = 0;
};

// The inputs and outputs of set 0, on the host.
struct HostSet {
  std::vector<__half> x, w, g, out;
  std::vector<float> scale, shift, first, second, dw;
};

// Every 61st row, and the last.
std::vector<long> sampled_rows(long rows) {
  std::vector<long> r;
  for (long i = 0; i < rows; i += 61) r.push_back(i);
  if (r.back() != rows - 1) r.push_back(rows - 1);
  return r;
}

// f(x) as the kernels compute it (one fused multiply-add), rounded to f16 as they store it.
double normalized(const HostSet& h, const Shape& sh, long r, int c) {
  const float v = std::fma(__half2float(h.x[r * sh.k + c]), h.scale[c], h.shift[c]);
  return __half2float(__float2half(sh.relu6 ? std::min(std::max(v, 0.0f), 6.0f) : v));
}

// One run of a form on set 0, its outputs poisoned first (0xFF bytes: NaN in f16 and f32) so
// that an output it did not write fails, then copied back with the inputs.
template <typename Run>
HostSet run_once(const Layer& l, bool backward, cudaStream_t s, Run run) {
  const Shape& sh = l.shape;
  const Buffers& b = l.sets[0];
  const size_t out_count = static_cast<size_t>(sh.rows) * (backward ? sh.k : sh.n);
  const int width = backward ? sh.k : sh.n;
  __half* out = backward ? b.da : b.z;
  check(cudaMemsetAsync(out, 0xFF, out_count * sizeof(__half), s), "poison");
  check(cudaMemsetAsync(b.first, 0xFF, width * sizeof(float), s), "poison");
  check(cudaMemsetAsync(b.second, 0xFF, width * sizeof(float), s), "poison");
  if (backward) check(cudaMemsetAsync(b.dw, 0xFF, long{sh.n} * sh.k * sizeof(float), s), "poison");
  run(b);
  check(cudaStreamSynchronize(s), "checked run");
  HostSet h;
  h.x = host_copy(b.x, static_cast<size_t>(sh.rows) * sh.k);
  h.w = host_copy(l.w, static_cast<size_t>(sh.n) * sh.k);
  h.scale = host_copy(l.scale, sh.k);
  h.shift = host_copy(l.shift, sh.k);
  h.out = host_copy(out, out_count);
  h.first = host_copy(b.first, width);
  h.second = host_copy(b.second, width);
  if (backward) {
    h.g = host_copy(b.g, static_cast<size_t>(sh.rows) * sh.n);
    h.dw = host_copy(b.dw, static_cast<size_t>(sh.n) * sh.k);
  }
  return h;
}

// The forward's z on the sampled rows against float64 products of the same f16 inputs, and its
// sums against float64 sums of all of z as stored.
Errors check_forward(const HostSet& h, const Shape& sh) {
  Errors e;
  Relative z, first, second;
  for (long r : sampled_rows(sh.rows)) {
    std::vector<double> a(sh.k);
    for (int c = 0; c < sh.k; ++c) a[c] = normalized(h, sh, r, c);
    for (int o = 0; o < sh.n; ++o) {
      double ref = 0;
      for (int c = 0; c < sh.k; ++c) ref += a[c] * __half2float(h.w[long{o} * sh.k + c]);
      z.add(__half2float(h.out[r * sh.n + o]), ref);
    }
  }
  std::vector<double> s(sh.n, 0.0), q(sh.n, 0.0);
  for (size_t i = 0; i < h.out.size(); ++i) {
    const double v = __half2float(h.out[i]);
    s[i % sh.n] += v;
    q[i % sh.n] += v * v;
  }
  for (int o = 0; o < sh.n; ++o) {
    first.add(h.first[o], s[o]);
    second.add(h.second[o], q[o]);
  }
  e.out = z.value();
  e.first = first.value();
  e.second = second.value();
  return e;
}

// The backward's da on the sampled rows; the previous batch norm's sums from all of da as stored
// and x; dw at 48 sampled entries, each summed over every row in float64.
Errors check_backward(const HostSet& h, const Shape& sh) {
  Errors e;
  Relative da, first, second, dw;
  for (long r : sampled_rows(sh.rows)) {
    for (int c = 0; c < sh.k; ++c) {
      double ref = 0;
      for (int o = 0; o < sh.n; ++o) {
        ref += double(__half2float(h.g[r * sh.n + o])) * __half2float(h.w[long{o} * sh.k + c]);
      }
      da.add(__half2float(h.out[r * sh.k + c]), ref);
    }
  }
  std::vector<double> s(sh.k, 0.0), q(sh.k, 0.0);
  for (size_t i = 0; i < h.out.size(); ++i) {
    const int c = static_cast<int>(i % sh.k);
    const float xv = __half2float(h.x[i]), v = std::fma(xv, h.scale[c], h.shift[c]);
    const bool passed = !sh.relu6 || (v > 0.0f && v < 6.0f);
    const double dy = passed ? double(__half2float(h.out[i])) : 0.0;
    s[c] += dy;
    q[c] += dy * xv;
  }
  for (int c = 0; c < sh.k; ++c) {
    first.add(h.first[c], s[c]);
    second.add(h.second[c], q[c]);
  }
  std::mt19937 pick(sh.n * 7919 + sh.k);
  for (int t = 0; t < 48; ++t) {
    const int o = static_cast<int>(pick() % sh.n), c = static_cast<int>(pick() % sh.k);
    double ref = 0;
    for (long r = 0; r < sh.rows; ++r) {
      ref += double(__half2float(h.g[r * sh.n + o])) * normalized(h, sh, r, c);
    }
    dw.add(h.dw[long{o} * sh.k + c], ref);
  }
  e.out = da.value();
  e.first = first.value();
  e.second = second.value();
  e.dw = dw.value();
  return e;
}

// f16 products summed in f32 land near 1e-3 of the norm; sums in f32 of f16 values far under.
bool good(const Errors& e, bool backward) {
  return e.out < 3e-3 && e.first < 1e-4 && e.second < 1e-4 && (!backward || e.dw < 1e-3);
}

Errors worst(const Errors& a, const Errors& b) {
  return {std::max(a.out, b.out), std::max(a.first, b.first), std::max(a.second, b.second),
          std::max(a.dw, b.dw)};
}

struct Totals {
  double passes = 0, fused = 0, bound = 0;
};

void print_header(const char* direction) {
  std::printf(
      "\n%s: us a layer (median of 7 x 10 replays); bound: the fused form's fewest bytes "
      "at 4.8 TB/s\n",
      direction);
  std::printf("%9s %4s %4s %5s | %8s %8s %7s | %6s | %8s %7s %7s %7s | %8s\n", "rows", "k", "n",
              "act", "passes", "fused", "ratio", "bound", "out err", "sum1 er", "sum2 er", "dw err",
              "cuBLAS");
}

void print_row(const Shape& sh, float passes, float fused, double bound, const Errors& e, bool ok,
               float gemms, Totals& t) {
  std::printf("%9ld %4d %4d %5s | %8.1f %8.1f %6.2fx | %6.1f | %8.1e %7.1e %7.1e %7.1e | %8.1f%s\n",
              sh.rows, sh.k, sh.n, sh.relu6 ? "relu6" : "bn", passes, fused, passes / fused, bound,
              e.out, e.first, e.second, e.dw, gemms, ok ? "" : "  WRONG");
  t.passes += passes * sh.count;
  t.fused += fused * sh.count;
  t.bound += bound * sh.count;
}

// What one direction runs, checks and must move at the least.
struct Direction {
  const char* title;
  bool backward;
  void (*passes)(const Layer&, const Buffers&, cublasHandle_t, cudaStream_t);
  void (*fused)(const Layer&, const Buffers&, cudaStream_t);
  void (*gemms)(const Layer&, const Buffers&, cublasHandle_t);
  Errors (*check)(const HostSet&, const Shape&);
  double (*fewest_bytes)(const Shape&);  // activations only; the weights are added to both
};

const Direction kDirections[] = {
    {"forward (z and its sums)", false, forward_passes, forward_fused, forward_gemm, check_forward,
     [](const Shape& sh) { return 2.0 * sh.rows * (sh.k + sh.n); }},  // x read, z written
    {"backward (dw, da and the previous batch norm's sums)", true, backward_passes, backward_fused,
     backward_gemms, check_backward,
     [](const Shape& sh) { return 2.0 * sh.rows * (sh.n + 2.0 * sh.k); }},  // g, x read, da written
};

}  // namespace

int main() {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cublasHandle_t blas;
  check(cublasCreate(&blas), "cublasCreate");
  check(cublasSetStream(blas, s), "cublasSetStream");
  // A workspace of its own, so that no GEMM allocates while a graph is captured.
  void* blas_workspace;
  check(cudaMalloc(&blas_workspace, 32 << 20), "malloc");
  check(cublasSetWorkspace(blas, blas_workspace, 32 << 20), "cublasSetWorkspace");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("%s: MobileNetV2's 1x1 convolutions, f16, batch 128, 224x224\n", prop.name);
  std::mt19937 rng(20261204);
  bool ok = true;
  for (const Direction& d : kDirections) {
    print_header(d.title);
    Totals t;
    for (const Shape& sh : probe::kMobileNetV2Pointwise) {
      Layer l = make_layer(sh, rng);
      auto passes = [&](const Buffers& b) { d.passes(l, b, blas, s); };
      auto fused = [&](const Buffers& b) { d.fused(l, b, s); };
      const Errors e = worst(d.check(run_once(l, d.backward, s, passes), sh),
                             d.check(run_once(l, d.backward, s, fused), sh));
      // us a layer: replays of a graph that runs the layer once on each input set
      const float passes_us = probe::graph_median_us(s, l.sets, passes);
      const float fused_us = probe::graph_median_us(s, l.sets, fused);
      const float gemms_us =
          probe::graph_median_us(s, l.sets, [&](const Buffers& b) { d.gemms(l, b, blas); });
      const double bound = (d.fewest_bytes(sh) + 2.0 * sh.k * sh.n) / 4.8e12 * 1e6;
      const bool layer_ok = good(e, d.backward);
      ok = ok && layer_ok;
      print_row(sh, passes_us, fused_us, bound, e, layer_ok, gemms_us, t);
      free_layer(l);
    }
    std::printf("MobileNetV2's 34 layers: passes %.1f us, fused %.1f us (%.2fx), bound %.1f us\n",
                t.passes, t.fused, t.passes / t.fused, t.bound);
  }
  check(cublasDestroy(blas), "cublasDestroy");
  check(cudaFree(blas_workspace), "free");
  if (!ok) std::printf("fused_pointwise_probe: a result is wrong (the rows marked WRONG)\n");
  return ok ? 0 : 1;
}
