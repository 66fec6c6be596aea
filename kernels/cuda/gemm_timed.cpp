// Note [Timed GEMM algorithms] in gemm_timed.h: the problem's key, cuBLASLt's candidates, their
// timing and the cache of the fastest.
#include "kernels/cuda/gemm_timed.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/deterministic.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_timing.h"
#include "kernels/cuda/handles.h"

namespace frugal::kernels::cuda {
namespace {

// Launches of each candidate between two events: one GEMM of a 7x7 layer takes 5-10 us.
constexpr int kTimedRepeats = 3;
// cuBLASLt's candidates are asked for at most this alignment (its default assumption).
constexpr uintptr_t kMaxAlignment = 256;

// The alignment that g's three pointers share, up to kMaxAlignment.
uint32_t shared_alignment(const ColumnMajorGemm& g) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(g.a) | reinterpret_cast<uintptr_t>(g.b) |
                         reinterpret_cast<uintptr_t>(g.c) | kMaxAlignment;
  return static_cast<uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

std::string key_of(Device device, const ColumnMajorGemm& g) {
  char s[160];
  std::snprintf(s, sizeof s, "%d|%d%d|%d,%d,%d|%d,%d,%d|%d,%d|%d|al%u", device.index,
                static_cast<int>(g.op_a), static_cast<int>(g.op_b), g.m, g.n, g.k, g.lda, g.ldb,
                g.ldc, static_cast<int>(g.type), static_cast<int>(g.c_type),
                static_cast<int>(g.compute), shared_alignment(g));
  return s;
}

// cuBLASLt's descriptors of g's problem: host objects, made once a problem.
class LtProblem {
 public:
  explicit LtProblem(const ColumnMajorGemm& g) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, g.compute, CUDA_R_32F));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &g.op_a, sizeof g.op_a));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &g.op_b, sizeof g.op_b));
    // As stored: op(a) is [m, k], so a is [m, k] or, transposed, [k, m]; likewise b for [k, n].
    const bool ta = g.op_a != CUBLAS_OP_N, tb = g.op_b != CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, g.type, ta ? g.k : g.m, ta ? g.m : g.k, g.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, g.type, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c_, g.c_type, g.m, g.n, g.ldc));
  }
  ~LtProblem() {
    if (c_ != nullptr) CUBLAS_CHECK_NOTHROW(cublasLtMatrixLayoutDestroy(c_));
    if (b_ != nullptr) CUBLAS_CHECK_NOTHROW(cublasLtMatrixLayoutDestroy(b_));
    if (a_ != nullptr) CUBLAS_CHECK_NOTHROW(cublasLtMatrixLayoutDestroy(a_));
    if (op_ != nullptr) CUBLAS_CHECK_NOTHROW(cublasLtMatmulDescDestroy(op_));
  }
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;

  // Up to `count` of cuBLASLt's heuristic algorithms for g, within the cuBLAS workspace and
  // g's pointers' alignment, best first.
  std::vector<cublasLtMatmulHeuristicResult_t> candidates(cublasLtHandle_t lt,
                                                          const ColumnMajorGemm& g, int count) {
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    std::vector<cublasLtMatmulHeuristicResult_t> found(static_cast<size_t>(count));
    int returned = 0;
    cublasStatus_t status = set_preferences(pref, shared_alignment(g));
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulAlgoGetHeuristic(lt, op_, a_, b_, c_, c_, pref, count, found.data(),
                                              &returned);
    }
    CUBLAS_CHECK_NOTHROW(cublasLtMatmulPreferenceDestroy(pref));
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) return {};  // no algorithm for the problem
    CUBLAS_CHECK(status);
    found.resize(static_cast<size_t>(std::max(returned, 0)));
    // each result carries its own state: only those that can run are candidates
    std::erase_if(found, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
    return found;
  }

  cublasStatus_t run(cublasLtHandle_t lt, cudaStream_t stream, const ColumnMajorGemm& g,
                     const cublasLtMatmulAlgo_t& algo, void* workspace) const {
    const float alpha = 1.0f;
    return cublasLtMatmul(lt, op_, &alpha, g.a, a_, g.b, b_, &g.beta, g.c, c_, g.c, c_, &algo,
                          workspace, kCublasWorkspaceBytes, stream);
  }

 private:
  static cublasStatus_t set_preferences(cublasLtMatmulPreference_t pref, uint32_t alignment) {
    const size_t bytes = kCublasWorkspaceBytes;
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      if (status != CUBLAS_STATUS_SUCCESS) break;
      status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof alignment);
    }
    return status;
  }

  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
};

uint32_t algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof v, &written));
  return v;
}

std::string describe(const cublasLtMatmulAlgo_t& algo) {
  char s[96];
  std::snprintf(s, sizeof s, "lt id %u tile %u stages %u split-k %u reduction %u",
                algo_config(algo, CUBLASLT_ALGO_CONFIG_ID),
                algo_config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                algo_config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                algo_config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                algo_config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
  return s;
}

// What a problem runs: GemmEx's pick (lt null) or a cuBLASLt algorithm.
struct Choice {
  std::shared_ptr<LtProblem> lt;
  cublasLtMatmulAlgo_t algo{};
  std::string name = "gemm_ex";
};

// Leaked, as the handles are (Note [Handle lifetime] in runtime.cpp).
std::mutex g_cache_mu;
// Shared and const, so that a cached call copies a pointer, not the choice's name.
using CachedChoice = std::shared_ptr<const Choice>;
std::unordered_map<std::string, CachedChoice>& g_cache =
    *new std::unordered_map<std::string, CachedChoice>();

void run_gemm_ex(const Context& ctx, const ColumnMajorGemm& g) {
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasGemmEx(cublas_handle(ctx), g.op_a, g.op_b, g.m, g.n, g.k, &alpha, g.a, g.type,
                            g.lda, g.b, g.type, g.ldb, &g.beta, g.c, g.c_type, g.ldc, g.compute,
                            CUBLAS_GEMM_DEFAULT));
}

// Runs `choice` for g: cuBLASLt's algorithm or GemmEx. A cuBLASLt status is returned, so that
// timing can drop an algorithm that cannot run; GemmEx's throws.
cublasStatus_t run_choice(const Context& ctx, cudaStream_t stream, const ColumnMajorGemm& g,
                          const Choice& choice) {
  if (choice.lt == nullptr) {
    run_gemm_ex(ctx, g);
    return CUBLAS_STATUS_SUCCESS;
  }
  // The workspace is GemmEx's, used in this stream's order as GemmEx uses it.
  return choice.lt->run(cublas_lt_handle(ctx.device), stream, g, choice.algo,
                        cublas_workspace(ctx.device));
}

bool skippable(cublasStatus_t status) {
  return status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE ||
         status == CUBLAS_STATUS_ARCH_MISMATCH;
}

// Events between the timed choices, destroyed also when a launch throws.
class EventChain {
 public:
  explicit EventChain(size_t count) : events_(count, nullptr) {
    for (cudaEvent_t& e : events_) CUDA_CHECK(cudaEventCreate(&e));
  }
  ~EventChain() {
    for (cudaEvent_t e : events_) {
      if (e != nullptr) CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
    }
  }
  EventChain(const EventChain&) = delete;
  EventChain& operator=(const EventChain&) = delete;
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

// Times every choice (Note [Timed GEMM algorithms]) and returns the fastest, without timing
// when only one can run; g's output is then the last choice's.
Choice fastest(const Context& ctx, cudaStream_t stream, const ColumnMajorGemm& g,
               std::vector<Choice> choices, const std::string& key) {
  std::vector<Choice> runnable;
  for (Choice& c : choices) {  // warm-up: modules load, and those that cannot run drop out
    const cublasStatus_t status = run_choice(ctx, stream, g, c);
    if (status == CUBLAS_STATUS_SUCCESS) {
      runnable.push_back(std::move(c));
    } else if (!skippable(status)) {
      CUBLAS_CHECK(status);
    }
  }
  if (runnable.size() == 1) {  // nothing to compare
    if (algorithm_log_enabled()) {
      std::fprintf(stderr, "[gemm] %s: only %s runs\n", key.c_str(), runnable[0].name.c_str());
    }
    return std::move(runnable[0]);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const EventChain events(runnable.size() + 1);
  // Long enough for the host to enqueue every launch before the first runs.
  hold_stream(stream, kTimingHoldNs +
                          int64_t{20'000} * kTimedRepeats * static_cast<int64_t>(runnable.size()));
  CUDA_CHECK(cudaEventRecord(events[0], stream));
  for (size_t i = 0; i < runnable.size(); ++i) {
    for (int r = 0; r < kTimedRepeats; ++r) CUBLAS_CHECK(run_choice(ctx, stream, g, runnable[i]));
    CUDA_CHECK(cudaEventRecord(events[i + 1], stream));
  }
  CUDA_CHECK(cudaEventSynchronize(events[runnable.size()]));
  size_t best = 0;
  float best_ms = 0.0f;
  for (size_t i = 0; i < runnable.size(); ++i) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
    if (i == 0 || ms < best_ms) best = i, best_ms = ms;
    if (algorithm_log_enabled()) {
      std::fprintf(stderr, "[gemm] %s: %s %.4f ms\n", key.c_str(), runnable[i].name.c_str(),
                   ms / kTimedRepeats);
    }
  }
  if (algorithm_log_enabled()) {
    std::fprintf(stderr, "[gemm] %s: chose %s\n", key.c_str(), runnable[best].name.c_str());
  }
  return std::move(runnable[best]);
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

void run_gemm(const Context& ctx, const ColumnMajorGemm& g) {
  if (deterministic() || !algorithm_timing_enabled() || g.beta != 0.0f) {
    run_gemm_ex(ctx, g);
    return;
  }
  cudaStream_t stream = stream_of(ctx, "gemm");
  const std::string key = key_of(ctx.device, g);
  CachedChoice cached;
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    if (auto it = g_cache.find(key); it != g_cache.end()) cached = it->second;
  }
  if (cached != nullptr) {
    CUBLAS_CHECK(run_choice(ctx, stream, g, *cached));
    return;
  }
  if (capturing(stream)) {  // nothing can be timed here; timed at the first call outside
    run_gemm_ex(ctx, g);
    return;
  }
  std::vector<Choice> choices(1);  // GemmEx's pick first
  auto lt = std::make_shared<LtProblem>(g);
  for (const auto& found : lt->candidates(cublas_lt_handle(ctx.device), g, kTimedGemmCandidates)) {
    choices.push_back({lt, found.algo, describe(found.algo)});
  }
  auto best = std::make_shared<const Choice>(fastest(ctx, stream, g, std::move(choices), key));
  CUBLAS_CHECK(run_choice(ctx, stream, g, *best));  // the output of the choice that stays
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache[key] = std::move(best);
}

bool run_gemm_candidate(const Context& ctx, const ColumnMajorGemm& g, int index) {
  if (index < 0) return false;
  auto lt = std::make_shared<LtProblem>(g);
  const auto found = lt->candidates(cublas_lt_handle(ctx.device), g, index + 1);
  if (static_cast<size_t>(index) >= found.size()) return false;
  CUBLAS_CHECK(
      run_choice(ctx, stream_of(ctx, "gemm"), g, {lt, found[static_cast<size_t>(index)].algo, ""}));
  return true;
}

std::string timed_gemm_choice(const Context& ctx, const ColumnMajorGemm& g) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  auto it = g_cache.find(key_of(ctx.device, g));
  return it == g_cache.end() ? "" : it->second->name;
}

void forget_gemm_algorithms() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache.clear();
}

}  // namespace frugal::kernels::cuda
