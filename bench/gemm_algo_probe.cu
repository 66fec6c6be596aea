// Which cuBLAS kernels should MobileNetV2's pointwise convolutions run? frugal calls
// cublasGemmEx with CUBLAS_GEMM_DEFAULT (kernels/cuda/matmul.cu), which takes cuBLAS's first
// heuristic pick untimed. Session 26's `ncu` of the f16 step put those GEMMs at 1.91 ms for
// 4.30 GB (2.1x their HBM bound) and the 33 `splitKreduce` launches after the split-K weight
// gradients at 0.17 ms more: together about a fifth of the step's time above the bound (issue
// 16's HBM goal). This standalone probe times, for each of the 19 shapes and each of the three
// GEMMs of a layer (forward, input gradient, weight gradient into f32, as conv.cu calls them):
// - "GemmEx": cublasGemmEx as frugal calls it, with frugal's 32 MiB workspace;
// - "Lt first": cublasLt's first heuristic result (GemmEx's own pick differs on some shapes);
// - "Lt best": the fastest of up to 32 heuristic results, each timed;
// - "no reduce": the fastest of those whose split-K, if any, sums in place (reduction scheme
//   NONE or INPLACE), so that no separate reduction kernel follows.
// Each is a replayed CUDA graph over enough operand sets to keep a round above twice the 50 MB
// L2 (the median of 7 x 10 replays, probe_common.cuh). Every candidate's result is checked
// against GemmEx's first; one that differs by more than f16's rounding is printed as WRONG, not
// timed, and makes the program exit 1. The "err" column is the worst of the others.
//   scripts/gpu-build.sh gemm_algo_probe && build-gpu/gemm_algo_probe
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mobilenet_v2_pointwise.h"
#include "probe_common.cuh"

namespace {

using probe::check;
using Shape = probe::PointwiseShape;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // kCublasWorkspaceBytes in kernels/matmul.h
constexpr int kHeuristics = 32;

// A row-major GEMM as kernels::cuda::gemm_tf32_out takes it: c[m, n] = op(a) op(b), a stored
// [m, k] ([k, m] when trans_a), b stored [k, n] ([n, k] when trans_b), f16 operands.
struct Gemm {
  const char* name;
  bool trans_a, trans_b;
  long m, n, k;
  bool f32_out;
  long a_elems() const { return m * k; }
  long b_elems() const { return k * n; }
  long c_elems() const { return m * n; }
  double bytes() const { return 2.0 * (a_elems() + b_elems()) + (f32_out ? 4.0 : 2.0) * c_elems(); }
};

// conv.cu's three calls for a 1x1 convolution of `rows` pixels, k -> n channels.
std::vector<Gemm> gemms_of(const Shape& s) {
  return {
      {"forward", false, true, s.rows, s.n, s.k, false},      // y = x w^T
      {"input grad", false, false, s.rows, s.k, s.n, false},  // dx = dy w
      {"weight grad", true, false, s.n, s.k, s.rows, true},   // dw = dy^T x, in f32
  };
}

__global__ void fill_kernel(__half* p, long n, unsigned seed) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n;
       i += long{gridDim.x} * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2half((static_cast<float>(h & 0xffff) / 32768.0f - 1.0f) * 0.5f);
  }
}

struct Operands {
  __half *a, *b;
  void* c;
};

// The Lt descriptors of one Gemm: cuBLAS is column-major, so the row-major c[m, n] is its
// [n, m], computed as op(b) op(a) with the operands swapped (as matmul.cu does).
struct LtProblem {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  explicit LtProblem(const Gemm& g) {
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    const cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
          "transa");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
          "transb");
    const uint64_t a_rows = g.trans_b ? g.k : g.n, a_cols = g.trans_b ? g.n : g.k;
    const uint64_t b_rows = g.trans_a ? g.m : g.k, b_cols = g.trans_a ? g.k : g.m;
    check(cublasLtMatrixLayoutCreate(&a, CUDA_R_16F, a_rows, a_cols, a_rows), "layout a");
    check(cublasLtMatrixLayoutCreate(&b, CUDA_R_16F, b_rows, b_cols, b_rows), "layout b");
    check(cublasLtMatrixLayoutCreate(&c, g.f32_out ? CUDA_R_32F : CUDA_R_16F, g.n, g.m, g.n),
          "layout c");
  }
  ~LtProblem() {
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;
};

// An algorithm in a named struct: nvcc 13.0 in C++20 mode fails an internal assertion when a
// std::vector holds cuBLASLt's anonymous C structs.
struct Algo {
  cublasLtMatmulAlgo_t algo;
};

std::vector<Algo> heuristics(cublasLtHandle_t lt, const LtProblem& p, bool in_place_only) {
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const size_t ws = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws),
        "workspace preference");
  if (in_place_only) {  // the mask lists the schemes allowed besides NONE
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_INPLACE;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                               &mask, sizeof mask),
          "reduction preference");
  }
  cublasLtMatmulHeuristicResult_t r[kHeuristics];
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, kHeuristics, r, &found),
        "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<Algo> algos;
  for (int i = 0; i < found; ++i) algos.push_back({r[i].algo});
  return algos;
}

uint32_t config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  check(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof v, &written), "algo config");
  return v;
}

std::string describe(const cublasLtMatmulAlgo_t& algo) {
  char s[96];
  std::snprintf(s, sizeof s, "id %u tile %u stages %u splitK %u red %u",
                config(algo, CUBLASLT_ALGO_CONFIG_ID), config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
  return s;
}

struct Probe {
  cudaStream_t s;
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  void *blas_ws, *lt_ws;
};

void run_gemmex(const Probe& pr, const Gemm& g, const Operands& o) {
  const float one = 1.0f, zero = 0.0f;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasGemmEx(pr.blas, op_b, op_a, int(g.n), int(g.m), int(g.k), &one, o.b, CUDA_R_16F,
                     int(g.trans_b ? g.k : g.n), o.a, CUDA_R_16F, int(g.trans_a ? g.m : g.k), &zero,
                     o.c, g.f32_out ? CUDA_R_32F : CUDA_R_16F, int(g.n), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void run_lt(const Probe& pr, const LtProblem& p, const cublasLtMatmulAlgo_t& algo,
            const Operands& o) {
  const float one = 1.0f, zero = 0.0f;
  check(cublasLtMatmul(pr.lt, p.op, &one, o.b, p.a, o.a, p.b, &zero, o.c, p.c, o.c, p.c, &algo,
                       pr.lt_ws, kWorkspaceBytes, pr.s),
        "cublasLtMatmul");
}

std::vector<float> download(const Gemm& g, const void* c) {
  std::vector<float> out(static_cast<size_t>(g.c_elems()));
  if (g.f32_out) {
    check(cudaMemcpy(out.data(), c, out.size() * 4, cudaMemcpyDeviceToHost), "download");
  } else {
    std::vector<__half> h(out.size());
    check(cudaMemcpy(h.data(), c, h.size() * 2, cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < h.size(); ++i) out[i] = __half2float(h[i]);
  }
  return out;
}

// ||got - ref|| / ||ref||.
double relative(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += double(got[i] - ref[i]) * (got[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
}

// Runs `run` once on `o` over a poisoned result and returns its distance from `ref`.
template <typename Run>
double check_against(const Probe& pr, const Gemm& g, const Operands& o,
                     const std::vector<float>& ref, Run run) {
  check(cudaMemsetAsync(o.c, 0xff, g.c_elems() * (g.f32_out ? 4 : 2), pr.s), "poison");
  run(o);
  check(cudaStreamSynchronize(pr.s), "check run");
  return relative(download(g, o.c), ref);
}

struct Choice {
  float us = INFINITY;
  std::string what = "none";
};

struct Totals {
  double gemmex = 0, first = 0, best = 0, no_reduce = 0, bound = 0;
};

// Times GemmEx and the Lt choices for one GEMM; false if a result disagrees with GemmEx's.
bool probe_gemm(const Probe& pr, const Gemm& g, int count, Totals& t) {
  std::vector<Operands> sets;
  const int n_sets = static_cast<int>(std::clamp(std::ceil(100e6 / g.bytes()), 1.0, 16.0));
  for (int i = 0; i < n_sets; ++i) {
    Operands o;
    check(cudaMalloc(&o.a, g.a_elems() * 2), "malloc");
    check(cudaMalloc(&o.b, g.b_elems() * 2), "malloc");
    check(cudaMalloc(&o.c, g.c_elems() * (g.f32_out ? 4 : 2)), "malloc");
    fill_kernel<<<1024, 256, 0, pr.s>>>(o.a, g.a_elems(), 17u * i + 1);
    fill_kernel<<<1024, 256, 0, pr.s>>>(o.b, g.b_elems(), 17u * i + 2);
    check(cudaGetLastError(), "fill");
    sets.push_back(o);
  }
  check(cudaStreamSynchronize(pr.s), "fill");
  run_gemmex(pr, g, sets[0]);
  // The stream is non-blocking: cudaMemcpy would not wait for it.
  check(cudaStreamSynchronize(pr.s), "reference run");
  const std::vector<float> ref = download(g, sets[0].c);
  bool ok = true;
  double worst = 0;
  const float gemmex =
      probe::graph_median_us(pr.s, sets, [&](const Operands& o) { run_gemmex(pr, g, o); });
  const LtProblem p(g);
  float first = INFINITY;
  Choice best, no_reduce;
  for (bool in_place_only : {false, true}) {
    const auto found = heuristics(pr.lt, p, in_place_only);
    for (size_t i = 0; i < found.size(); ++i) {
      const cublasLtMatmulAlgo_t& algo = found[i].algo;
      auto run = [&](const Operands& o) { run_lt(pr, p, algo, o); };
      const double e = check_against(pr, g, sets[0], ref, run);
      if (!(e < (g.f32_out ? 1e-4 : 2e-3))) {  // named here, and never chosen below
        std::printf("  WRONG: %s %ldx%ldx%ld, %s: %.1e from GemmEx's result\n", g.name, g.m, g.n,
                    g.k, describe(algo).c_str(), e);
        ok = false;
        continue;
      }
      worst = std::max(worst, e);
      const float us = probe::graph_median_us(pr.s, sets, run);
      if (!in_place_only && i == 0) first = us;
      Choice& into = in_place_only ? no_reduce : best;
      if (us < into.us) into = {us, describe(algo)};
    }
  }
  best = best.us <= no_reduce.us ? best : no_reduce;  // the in-place-only list may find others
  const double bound = g.bytes() / 4.8e12 * 1e6;
  std::printf("%-11s %8ld %5ld %8ld x%d | %7.1f %7.1f %7.1f %7.1f | %6.1f | %.1e | %s | %s\n",
              g.name, g.m, g.n, g.k, count, gemmex, first, best.us, no_reduce.us, bound, worst,
              best.what.c_str(), no_reduce.what.c_str());
  t.gemmex += gemmex * count;
  t.first += first * count;
  t.best += best.us * count;
  t.no_reduce += no_reduce.us * count;
  t.bound += bound * count;
  for (Operands& o : sets) {
    for (void* q : {static_cast<void*>(o.a), static_cast<void*>(o.b), o.c})
      check(cudaFree(q), "free");
  }
  return ok;
}

}  // namespace

int main() {
  Probe pr;
  check(cudaStreamCreateWithFlags(&pr.s, cudaStreamNonBlocking), "stream");
  check(cublasCreate(&pr.blas), "cublasCreate");
  check(cublasSetStream(pr.blas, pr.s), "cublasSetStream");
  check(cublasLtCreate(&pr.lt), "cublasLtCreate");
  // Workspaces of their own, so that nothing allocates while a graph is captured.
  check(cudaMalloc(&pr.blas_ws, kWorkspaceBytes), "malloc");
  check(cudaMalloc(&pr.lt_ws, kWorkspaceBytes), "malloc");
  check(cublasSetWorkspace(pr.blas, pr.blas_ws, kWorkspaceBytes), "cublasSetWorkspace");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf(
      "%s, cuBLAS %d: MobileNetV2's 1x1 convolutions as conv.cu's GEMMs, f16, batch 128, "
      "224x224; us a GEMM (median of 7 x 10 replays); bound: its bytes at 4.8 TB/s\n",
      prop.name, int(cublasLtGetVersion()));
  std::printf("%-11s %8s %5s %8s %2s | %7s %7s %7s %7s | %6s | %7s | %s | %s\n", "GEMM", "m", "n",
              "k", "", "GemmEx", "Lt 1st", "Lt best", "no red", "bound", "err", "best",
              "best without a reduce kernel");
  bool ok = true;
  Totals all[3];
  for (const Shape& sh : probe::kMobileNetV2Pointwise) {
    const std::vector<Gemm> gs = gemms_of(sh);
    for (size_t i = 0; i < gs.size(); ++i) ok = probe_gemm(pr, gs[i], sh.count, all[i]) && ok;
  }
  const char* names[] = {"forward", "input grad", "weight grad"};
  Totals sum;
  for (int i = 0; i < 3; ++i) {
    const Totals& t = all[i];
    std::printf(
        "%-11s, 34 layers (us): GemmEx %.1f, Lt first %.1f, Lt best %.1f, no reduce "
        "kernel %.1f, bound %.1f\n",
        names[i], t.gemmex, t.first, t.best, t.no_reduce, t.bound);
    sum.gemmex += t.gemmex;
    sum.first += t.first;
    sum.best += t.best;
    sum.no_reduce += t.no_reduce;
    sum.bound += t.bound;
  }
  std::printf(
      "all three, 34 layers (us): GemmEx %.1f, Lt first %.1f, Lt best %.1f, no reduce "
      "kernel %.1f, bound %.1f\n",
      sum.gemmex, sum.first, sum.best, sum.no_reduce, sum.bound);
  cublasLtDestroy(pr.lt);
  check(cublasDestroy(pr.blas), "cublasDestroy");
  check(cudaFree(pr.blas_ws), "free");
  check(cudaFree(pr.lt_ws), "free");
  if (!ok) std::printf("gemm_algo_probe: a result differs from cublasGemmEx's\n");
  return ok ? 0 : 1;
}
