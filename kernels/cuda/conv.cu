// 2-D convolution through cuDNN 9 (its legacy API, and its graph API's plans beside it: Note
// [Graph API candidates] in cudnn_graph.h) in NHWC with OHWI filters ([K, kh, kw, C/groups]
// is cuDNN's NHWC filter layout). Groups use the group count; 3x3 and 5x5 depthwise go to
// frugal's own kernels (Note [Depthwise kernels] in depthwise_conv.h), pointwise ones to
// cuBLAS (Note [Pointwise convolutions as GEMMs]), and the 16-bit weight gradient of 3x3
// convolutions with at most 4 input channels to another own kernel (Note [Few-channel weight
// gradients]).
// f16/bf16 may use tensor cores, f32 may use TF32 unless conv_allow_tf32() is off (then FMA only,
// matching the CPU); compute is always float.
//
// Note [Conv algorithm cache]: for each (device, direction, dtype, shape) the heuristic list of
// cudnnGet*Algorithm_v7 is filtered to algorithms whose workspace fits the call's bound (Note
// [Bounded conv workspace] in kernels/conv_workspace.h) and kept in order; each call allocates
// the bound once, for every candidate it runs. A call runs the first; when cuDNN answers "not
// supported" for it, the next is tried and moved to the front, so the list converges on an
// algorithm that runs. Benchmark mode (the default, like PyTorch's cudnn.benchmark;
// FRUGAL_CUDNN_BENCHMARK=0 turns it off): the first call of a configuration times the first
// kMaxBenchmarked candidates and up to kMaxGraphBenchmarked execution plans of cuDNN's graph API
// (Note [Graph API candidates] in cudnn_graph.h) by their device time alone (Note [Timing device
// work alone] in device_timing.h), and moves the fastest to the front. That call synchronises the
// host once a candidate; every candidate writes the complete output (beta = 0), so the call's
// result is valid whichever ran last. Heuristic order alone picked algorithms several times slower
// for NHWC depthwise shapes. Deterministic mode (Note [Deterministic mode] in base/deterministic.h)
// never benchmarks and keeps only the algorithms cuDNN marks CUDNN_DETERMINISTIC, so the
// heuristic's first deterministic algorithm that runs is the one used, on every run.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/deterministic.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"
#include "kernels/conv_workspace.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cudnn_graph.h"
#include "kernels/cuda/depthwise_conv.h"
#include "kernels/cuda/device_timing.h"
#include "kernels/cuda/few_channel_conv.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/space_to_depth_conv.h"
#include "kernels/cuda/stem_gemm.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace frugal::kernels::cuda {
namespace {

constexpr size_t kMaxBenchmarked = 8;
constexpr size_t kMaxGraphBenchmarked = 8;

enum class Direction { forward, backward_data, backward_filter };

// A legacy algorithm with its math type, or (plan non-null) a graph API execution plan.
struct Candidate {
  int algo = -1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
  std::shared_ptr<const GraphPlan> plan;
};

// For FRUGAL_CUDNN_LOG=1.
std::string describe(const Candidate& c) {
  const std::string which = c.plan != nullptr ? ::frugal::detail::str("engine ", c.plan->engine())
                                              : ::frugal::detail::str("algo ", c.algo, " math ",
                                                                      static_cast<int>(c.math));
  char ws[32];
  std::snprintf(ws, sizeof ws, " ws %.1f MiB", static_cast<double>(c.workspace) / (1 << 20));
  return which + ws;
}

// The pass's three tensors as the graph API's variant pack takes them: x, w and y, dx standing
// for x in the input gradient and dw for w in the weight gradient.
struct PassTensors {
  const void* x;
  const void* w;
  const void* y;
};

cudnnDataType_t cudnn_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f64:
      FRUGAL_FAIL(op, ": f64 is CPU-only");
    default:
      FRUGAL_FAIL(op, ": dtype ", dtype, " is not a floating type");
  }
}

void check_shape(const Conv2dShape& s, const char* op) {
  FRUGAL_CHECK(s.groups >= 1 && s.c % s.groups == 0 && s.k % s.groups == 0, op,
               ": channels must divide into groups: ", s.str());
  FRUGAL_CHECK(s.stride_h >= 1 && s.stride_w >= 1 && s.dil_h >= 1 && s.dil_w >= 1 && s.pad_h >= 0 &&
                   s.pad_w >= 0 && s.kh >= 1 && s.kw >= 1,
               op, ": bad kernel geometry ", s.str());
  FRUGAL_CHECK(s.oh() >= 1 && s.ow() >= 1, op, ": empty output for ", s.str());
  for (int64_t v : {s.n, s.h, s.w, s.c, s.k, s.oh(), s.ow()}) {
    FRUGAL_CHECK(v >= 0 && v <= INT_MAX, op, ": sizes exceed cuDNN's 32-bit range: ", s.str());
  }
}

// 16-bit: tensor cores. f32: cuDNN's default math lets it pick TF32 tensor-core kernels; FMA
// keeps products in full f32.
cudnnMathType_t initial_math(DType dtype) {
  if (dtype != DType::f32) return CUDNN_TENSOR_OP_MATH;
  return conv_allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

// The four descriptors of one call; destroyed without throwing.
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ConvDescriptors(const Conv2dShape& s, DType dtype, const char* op) {
    cudnnDataType_t t = cudnn_type(dtype, op);
    auto i = [](int64_t v) { return static_cast<int>(v); };
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    // cuDNN takes dims in N, C, H, W order whatever the format.
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, t, i(s.n), i(s.c), i(s.h), i(s.w)));
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, t, i(s.n), i(s.k), i(s.oh()), i(s.ow())));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NHWC, i(s.k), i(s.cin_per_group()),
                                           i(s.kh), i(s.kw)));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, i(s.pad_h), i(s.pad_w), i(s.stride_h),
                                                i(s.stride_w), i(s.dil_h), i(s.dil_w),
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, i(s.groups)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, initial_math(dtype)));
  }
  ~ConvDescriptors() {
    if (conv != nullptr) CUDNN_CHECK_NOTHROW(cudnnDestroyConvolutionDescriptor(conv));
    if (w != nullptr) CUDNN_CHECK_NOTHROW(cudnnDestroyFilterDescriptor(w));
    if (y != nullptr) CUDNN_CHECK_NOTHROW(cudnnDestroyTensorDescriptor(y));
    if (x != nullptr) CUDNN_CHECK_NOTHROW(cudnnDestroyTensorDescriptor(x));
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;
};

size_t workspace_size(cudnnHandle_t h, const ConvDescriptors& d, Direction dir, int algo,
                      cudnnStatus_t* st) {
  size_t bytes = 0;
  switch (dir) {
    case Direction::forward:
      *st = cudnnGetConvolutionForwardWorkspaceSize(
          h, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes);
      break;
    case Direction::backward_data:
      *st = cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
      break;
    case Direction::backward_filter:
      *st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
      break;
  }
  return bytes;
}

// Whether an f32 call of this direction and shape may run TF32 kernels: as conv_allow_tf32()
// says, but not in deterministic mode for the input gradient of strided convolutions. There
// cuDNN 9's only deterministic TF32 algorithm on sm90 runs sm90_xmma_dgrad_implicit_gemm_indexed_
// ..._strided, the one kernel of the gpu suite where compute-sanitizer's racecheck reports
// shared-memory races (2 errors in NVIDIA's code, bench/RESULTS.md; FMA math and the
// nondeterministic algorithm 0 show none). A race may make a result depend on timing, which
// deterministic mode rules out, so that gradient runs in full f32 there (slower, as with
// FRUGAL_ALLOW_TF32=0); everywhere else TF32 stays as configured.
bool tf32_for(Direction dir, const Conv2dShape& s) {
  if (!conv_allow_tf32()) return false;
  const bool strided = s.stride_h > 1 || s.stride_w > 1;
  return !(deterministic() && dir == Direction::backward_data && strided);
}

// Keeps the heuristic's order; drops failures, workspaces above `limit`, for f32 any
// conversion to 16 bits (and TF32 too unless `tf32`), and in deterministic mode the
// algorithms that cuDNN does not mark deterministic (those that sum with atomics).
template <typename Perf>
std::vector<Candidate> filter(cudnnHandle_t h, const ConvDescriptors& d, Direction dir, bool is_f32,
                              bool tf32, size_t limit, const Perf* perf, int count) {
  const bool only_deterministic = deterministic();
  std::vector<Candidate> out;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (only_deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    cudnnMathType_t math = perf[i].mathType;
    if (is_f32) {
      if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
      if (!tf32) {
        if (math != CUDNN_DEFAULT_MATH && math != CUDNN_FMA_MATH) continue;
        math = CUDNN_FMA_MATH;
      }
    }
    bool seen = false;
    for (const Candidate& c : out)
      seen |= c.algo == static_cast<int>(perf[i].algo) && c.math == math;
    if (seen) continue;
    CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, math));
    cudnnStatus_t st;
    size_t bytes = workspace_size(h, d, dir, static_cast<int>(perf[i].algo), &st);
    if (st != CUDNN_STATUS_SUCCESS || bytes > limit) continue;
    out.push_back({static_cast<int>(perf[i].algo), math, bytes, nullptr});
  }
  return out;
}

std::vector<Candidate> heuristic_candidates(cudnnHandle_t h, const ConvDescriptors& d,
                                            Direction dir, bool is_f32, bool tf32, size_t limit) {
  int got = 0;
  switch (dir) {
    case Direction::forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
          h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
      return filter(h, d, dir, is_f32, tf32, limit, perf, got);
    }
    case Direction::backward_data: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
      return filter(h, d, dir, is_f32, tf32, limit, perf, got);
    }
    case Direction::backward_filter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
      return filter(h, d, dir, is_f32, tf32, limit, perf, got);
    }
  }
  return {};
}

std::mutex g_cache_mu;
// Note [Conv algorithm cache]. Leaked, as the handles are (Note [Handle lifetime]): graph API
// plans destroyed by static destructors at exit could outlive the CUDA context they refer to.
std::unordered_map<std::string, std::vector<Candidate>>& g_cache =
    *new std::unordered_map<std::string, std::vector<Candidate>>();

const char* direction_name(Direction dir) {
  switch (dir) {
    case Direction::forward:
      return "conv2d_forward";
    case Direction::backward_data:
      return "conv2d_backward_input";
    case Direction::backward_filter:
      return "conv2d_backward_weight";
  }
  return "conv2d";
}

ConvPass pass_of(Direction dir) {
  switch (dir) {
    case Direction::forward:
      return ConvPass::forward;
    case Direction::backward_data:
      return ConvPass::backward_input;
    case Direction::backward_filter:
      return ConvPass::backward_weight;
  }
  return ConvPass::forward;
}

// A pass's bounded workspace held by its caller: a rewritten stem's, inside the one allocation
// that also holds the rewritten tensors (Note [Stride-2 stems as stride-1 convolutions]). Empty
// (data null): the pass allocates cuda_conv_workspace_bytes() itself.
struct GivenWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// The workspace of one cuDNN call (Note [Bounded conv workspace]): the bound, allocated once for
// every candidate the call runs, and one of a candidate's own where it needs more (only when no
// algorithm fits the bound).
class CallWorkspace {
 public:
  // `given`: `bound` bytes the caller holds, so that the pass asks for none of its own; null:
  // the call allocates them.
  CallWorkspace(const Context& ctx, size_t bound, void* given)
      : ctx_(ctx),
        bound_(bound),
        bounded_(bound > 0 && given == nullptr
                     ? ctx.workspace(bound, memory::Category::conv_workspace)
                     : memory::DataPtr()),
        base_(given != nullptr ? given : bounded_.get()) {}
  size_t bound() const { return bound_; }
  // (pointer, bytes) to launch `c` with.
  std::pair<void*, size_t> for_candidate(const Candidate& c) {
    if (c.workspace <= bound_) return {base_, bound_};
    own_ = ctx_.workspace(c.workspace);
    return {own_.get(), c.workspace};
  }

 private:
  const Context& ctx_;
  size_t bound_;
  memory::DataPtr bounded_;
  void* base_;
  memory::DataPtr own_;
};

// Times every candidate (one warm-up and one timed launch each; first_candidates bounds their
// number), drops those cuDNN cannot run, and leaves `list` fastest first. See Note [Conv
// algorithm cache].
template <typename Launch>
void benchmark(const Context& ctx, std::vector<Candidate>& list, CallWorkspace& workspace,
               const std::string& what, Launch launch) {
  cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream);
  const TimingEvents events;
  std::vector<std::pair<float, Candidate>> timed;
  cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
  for (const Candidate& c : list) {
    auto [ws, bytes] = workspace.for_candidate(c);
    last = launch(c, ws, bytes);  // warm-up (lazy module loads)
    if (last != CUDNN_STATUS_SUCCESS) {
      int category = CUDNN_STATUS_CATEGORY(last);
      if (category != CUDNN_STATUS_NOT_SUPPORTED && category != CUDNN_STATUS_BAD_PARAM) {
        CUDNN_CHECK(last);
      }
      continue;
    }
    // Device time alone (Note [Timing device work alone]): a replayed step pays no host time.
    const float ms = time_on_device(stream, events, [&] { CUDNN_CHECK(launch(c, ws, bytes)); });
    timed.emplace_back(ms, c);
  }
  FRUGAL_CHECK(!timed.empty(), "conv2d: no cuDNN algorithm runs this configuration (last status ",
               static_cast<int>(last), ": ", cudnnGetErrorString(last), ")");
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (algorithm_log_enabled()) {
    std::fprintf(stderr, "[cudnn] %s bound %.1f MiB:", what.c_str(),
                 static_cast<double>(workspace.bound()) / (1 << 20));
    for (auto& [ms, c] : timed) std::fprintf(stderr, " %s %.3f ms;", describe(c).c_str(), ms);
    std::fprintf(stderr, "\n");
  }
  list.clear();
  for (auto& [ms, c] : timed) list.push_back(c);
}

// The candidates of a configuration seen for the first time: those within `bound`, else, with
// one warning, those within kConvWorkspaceCap, smallest workspace first. With `to_benchmark`, the
// legacy API's first kMaxBenchmarked followed by the graph API's first kMaxGraphBenchmarked plans
// within `bound` (Note [Graph API candidates]); else the legacy API's alone, in its order.
std::vector<Candidate> first_candidates(cudnnHandle_t h, const ConvDescriptors& d, Direction dir,
                                        DType dtype, bool tf32, size_t bound, const Conv2dShape& s,
                                        bool to_benchmark) {
  const bool is_f32 = dtype == DType::f32;
  std::vector<Candidate> list = heuristic_candidates(h, d, dir, is_f32, tf32, bound);
  if (to_benchmark) {
    if (list.size() > kMaxBenchmarked) list.resize(kMaxBenchmarked);
    for (auto& plan : graph_plans(h, pass_of(dir), dtype, s, tf32, bound, kMaxGraphBenchmarked)) {
      list.push_back({-1, CUDNN_DEFAULT_MATH, plan->workspace(), std::move(plan)});
    }
  }
  if (!list.empty() || bound >= kConvWorkspaceCap) return list;
  list = heuristic_candidates(h, d, dir, is_f32, tf32, kConvWorkspaceCap);
  std::stable_sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) {
    return a.workspace < b.workspace;
  });
  if (!list.empty()) {
    std::fprintf(stderr,
                 "frugal warning: %s %s in %s: no cuDNN algorithm fits the %.1f MiB workspace "
                 "bound; using one that needs %.1f MiB, outside the step's plan\n",
                 direction_name(dir), s.str().c_str(), dtype_name(dtype),
                 static_cast<double>(bound) / (1 << 20),
                 static_cast<double>(list.front().workspace) / (1 << 20));
  }
  return list;
}

// Runs the pass with the cached candidates of this configuration, falling back along the list as
// Note [Conv algorithm cache] says: a legacy algorithm through `legacy(algo, workspace, bytes)`
// (returning the cuDNN status), a graph API plan on `tensors`.
// `given`: the pass's bounded workspace when the caller holds it, its bytes the bound.
template <typename Legacy>
void run_conv(const Context& ctx, cudnnHandle_t h, const ConvDescriptors& d, Direction dir,
              DType dtype, const Conv2dShape& s, const PassTensors& tensors,
              const GivenWorkspace& given, Legacy legacy) {
  // Plans are built for 16-byte aligned tensors; a view at another offset takes the legacy
  // candidates, which check alignment when they run. The plans stay cached for the aligned calls
  // of the same configuration (the loop below skips them rather than dropping them); only a first
  // call that is unaligned benchmarks without them.
  const bool aligned =
      (reinterpret_cast<uintptr_t>(tensors.x) | reinterpret_cast<uintptr_t>(tensors.w) |
       reinterpret_cast<uintptr_t>(tensors.y)) %
          kGraphAlignment ==
      0;
  auto launch = [&](const Candidate& c, void* ws, size_t bytes) {
    if (c.plan != nullptr) {
      if (!aligned) return CUDNN_STATUS_NOT_SUPPORTED;
      return c.plan->execute(h, tensors.x, tensors.w, tensors.y, ws);
    }
    CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
    return legacy(c.algo, ws, bytes);
  };
  const char* op = direction_name(dir);
  const bool tf32 = dtype == DType::f32 && tf32_for(dir, s);
  const bool fixed = deterministic();  // its list holds deterministic algorithms only
  const size_t bound =
      given.data != nullptr ? given.bytes : cuda_conv_workspace_bytes(pass_of(dir), dtype, s);
  CallWorkspace workspace(ctx, bound, given.data);  // every step asks for these, first included
  std::string key = ::frugal::detail::str(op, '|', ctx.device.index, '|', dtype_name(dtype),
                                          tf32 ? "+tf32|" : "|", fixed ? "det|" : "", s.str());
  std::vector<Candidate> list;
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = g_cache.find(key);
    if (it != g_cache.end()) list = it->second;
  }
  if (list.empty()) {
    const bool to_benchmark = algorithm_timing_enabled() && !fixed;
    list = first_candidates(h, d, dir, dtype, tf32, bound, s, to_benchmark);
    FRUGAL_CHECK(!list.empty(), op, ": cuDNN offers no ", fixed ? "deterministic " : "",
                 "algorithm for ", s.str(), " in ", dtype, " within the ", kConvWorkspaceCap >> 20,
                 " MiB workspace cap");
    const bool benchmarked = to_benchmark && list.size() > 1;
    if (benchmarked) benchmark(ctx, list, workspace, key, launch);  // also computes the output
    if (!benchmarked && algorithm_log_enabled()) {
      std::fprintf(stderr, "[cudnn] %s bound %.1f MiB: %s, untimed (%zu candidate%s)\n",
                   key.c_str(), static_cast<double>(bound) / (1 << 20),
                   describe(list.front()).c_str(), list.size(), list.size() == 1 ? "" : "s");
    }
    std::lock_guard<std::mutex> lock(g_cache_mu);
    g_cache[key] = list;
    if (benchmarked) return;
  }
  cudnnStatus_t last = CUDNN_STATUS_SUCCESS, first_failure = CUDNN_STATUS_SUCCESS;
  std::vector<Candidate> kept;  // the list without the candidates that failed before one ran
  size_t failed = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const Candidate& c = list[i];
    if (c.plan != nullptr && !aligned) {  // this call's tensors, not the plan: keep it
      kept.push_back(c);
      continue;
    }
    auto [ws, bytes] = workspace.for_candidate(c);
    last = launch(c, ws, bytes);
    if (last == CUDNN_STATUS_SUCCESS) {
      if (failed > 0) {  // those that failed before it cannot run this configuration
        // A fallback can cost several times the benchmarked kernel's time, silently: say so.
        if (algorithm_log_enabled()) {
          std::fprintf(stderr,
                       "[cudnn] %s: %zu candidate%s stopped running (first status %d: %s; "
                       "tensors %saligned to %zu bytes) and dropped; now %s\n",
                       key.c_str(), failed, failed == 1 ? "" : "s", static_cast<int>(first_failure),
                       cudnnGetErrorString(first_failure), aligned ? "" : "not ", kGraphAlignment,
                       describe(c).c_str());
        }
        kept.insert(kept.end(), list.begin() + static_cast<int64_t>(i), list.end());
        std::lock_guard<std::mutex> lock(g_cache_mu);
        g_cache[key] = std::move(kept);
      }
      return;
    }
    int category = CUDNN_STATUS_CATEGORY(last);
    if (category != CUDNN_STATUS_NOT_SUPPORTED && category != CUDNN_STATUS_BAD_PARAM) {
      CUDNN_CHECK(last);  // a real failure: throws with cuDNN's message
    }
    if (failed++ == 0) first_failure = last;
  }
  FRUGAL_FAIL(op, ": no cuDNN algorithm runs ", s.str(), " in ", dtype, " (last status ",
              static_cast<int>(last), ": ", cudnnGetErrorString(last), ")");
}

// Note [Pointwise convolutions as GEMMs]: a 1x1 convolution with stride 1, no padding and one
// group is, in NHWC, the product of the [N*H*W, C] input with the [K, C] weights: forward
// y = x w^T, input gradient dx = dy w, weight gradient dw = dy^T x. cuBLAS runs them with a few
// microseconds of host time a call, where cuDNN's legacy API spent 30-130 us (f16 weight
// gradients the most; FRUGAL_HOST_PROFILE=1 on MobileNetV2 at 32x32), which left the device
// waiting on the host for small inputs. f32 follows conv_allow_tf32() as the cuDNN path does.
// pointwise() (kernels/conv_workspace.h) says which shapes.

// y[r, k] += bias[k] over rows of an NHWC output.
template <typename T>
__global__ void add_bias_kernel(int64_t n, int64_t k, const T* bias, T* y) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    y[i] = from_f<T>(to_f(y[i]) + to_f(bias[i % k]));
  }
}

}  // namespace

void forget_conv_algorithms() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache.clear();
}

namespace {

// y = conv(x, w) on cuDNN; `given`: the pass's workspace bound when the caller holds it.
void cudnn_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                   const void* w, void* y, const GivenWorkspace& given) {
  ConvDescriptors d(s, dtype, "conv2d_forward");
  cudnnHandle_t h = cudnn_handle(ctx);
  float one = 1.0f, zero = 0.0f;
  run_conv(ctx, h, d, Direction::forward, dtype, s, {x, w, y}, given,
           [&](int algo, void* ws, size_t bytes) {
             return cudnnConvolutionForward(h, &one, d.x, x, d.w, w, d.conv,
                                            static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes,
                                            &zero, d.y, y);
           });
}

// dw = the weight gradient in dtype on cuDNN; `given` as for cudnn_forward.
void cudnn_backward_weight(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                           const void* dy, void* dw, const GivenWorkspace& given) {
  const char* op = "conv2d_backward_weight";
  ConvDescriptors d(s, dtype, op);
  cudnnHandle_t h = cudnn_handle(ctx);
  float one = 1.0f, zero = 0.0f;
  run_conv(ctx, h, d, Direction::backward_filter, dtype, s, {x, dw, dy}, given,
           [&](int algo, void* ws, size_t bytes) {
             return cudnnConvolutionBackwardFilter(
                 h, &one, d.x, x, d.y, dy, d.conv,
                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes, &zero, d.w, dw);
           });
}

// conv2d_forward, and conv2d_forward_bn_act where depthwise_reads_bn_act (bn non-null: x is z,
// normalized in the depthwise kernel's loads).
void forward(const Context& ctx, DType dtype, const Conv2dShape& s, const BnActInput* bn,
             const void* x, const void* w, const void* bias, void* y) {
  cudaStream_t stream = stream_of(ctx, "conv2d_forward");
  check_shape(s, "conv2d_forward");
  cudnn_type(dtype, "conv2d_forward");  // names this op for f64 whichever path runs it
  if (s.n == 0 || s.k == 0) return;
  DeviceGuard guard(ctx.device);
  if (depthwise_handles(s)) {
    depthwise_forward(ctx, dtype, s, x, w, bias, y, bn);
    return;
  }
  FRUGAL_CHECK(bn == nullptr, "conv2d_forward_bn_act: no kernel reads z for ", s.str());
  if (dtype != DType::f32 && few_channel_handles(s)) {  // Note [Few-channel forwards]
    few_channel_forward(ctx, dtype, s, x, w, bias, y);
    return;
  }
  if (pointwise(s)) {  // y[M, K] = x[M, C] w[K, C]^T
    gemm_tf32(ctx, dtype, false, true, s.n * s.h * s.w, s.k, s.c, x, w, 0.0, y, conv_allow_tf32());
  } else if (space_to_depth_handles(dtype, s)) {  // Note [Stride-2 stems as stride-1 ...]
    const SpaceToDepth r = space_to_depth(s);
    memory::DataPtr ws = ctx.workspace(cuda_conv_workspace_bytes(ConvPass::forward, dtype, s),
                                       memory::Category::conv_workspace);
    char* z = static_cast<char*>(ws.get());
    char* w2 = z + space_to_depth_input_bytes(dtype, s);
    space_to_depth_input(ctx, dtype, s, r, x, z);
    space_to_depth_weights(ctx, dtype, s, r, w, w2);
    cudnn_forward(ctx, dtype, r.inner, z, w2, y,
                  {w2 + space_to_depth_weight_bytes(dtype, s),
                   space_to_depth_inner_bound(ConvPass::forward, dtype, s)});
  } else {
    cudnn_forward(ctx, dtype, s, x, w, y, {});
  }
  if (bias != nullptr) {
    int64_t n = s.n * s.oh() * s.ow() * s.k;
    FRUGAL_CUDA_FLOAT_SWITCH(dtype, "conv2d_forward", {
      add_bias_kernel<T><<<grid_for(ctx, n), kThreads, 0, stream>>>(
          n, s.k, static_cast<const T*>(bias), static_cast<T*>(y));
      FRUGAL_LAUNCH_CHECK();
    });
  }
}

// x = act(bn(z)) in a workspace: the route of the shapes no kernel reads z for.
memory::DataPtr apply_bn_act(const Context& ctx, DType dtype, const Conv2dShape& s,
                             const BnActInput& in, const void* z) {
  const int64_t rows = s.n * s.h * s.w;
  memory::DataPtr x = ctx.workspace(static_cast<size_t>(rows * s.c) * dtype_size(dtype));
  cuda::batch_norm_act_apply(ctx, dtype, in.act, rows, s.c, z, in.gamma, in.beta, in.mean,
                             in.invstd, x.get());
  return x;
}

}  // namespace

void conv2d_forward(const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                    const void* w, const void* bias, void* y) {
  forward(ctx, dtype, s, nullptr, x, w, bias, y);
}

// Note [Batch norm inside the depthwise convolution] (kernels/conv.h).
void conv2d_forward_bn_act(const Context& ctx, DType dtype, const Conv2dShape& s,
                           const BnActInput& in, const void* z, const void* w, const void* bias,
                           void* y) {
  if (depthwise_reads_bn_act(dtype, s, in, {z, bias, y})) {
    forward(ctx, dtype, s, &in, z, w, bias, y);
    return;
  }
  memory::DataPtr x = apply_bn_act(ctx, dtype, s, in, z);
  forward(ctx, dtype, s, nullptr, x.get(), w, bias, y);
}

void conv2d_backward_input(const Context& ctx, DType dtype, const Conv2dShape& s, const void* dy,
                           const void* w, void* dx) {
  stream_of(ctx, "conv2d_backward_input");
  check_shape(s, "conv2d_backward_input");
  cudnn_type(dtype, "conv2d_backward_input");
  if (s.n == 0 || s.c == 0) return;
  DeviceGuard guard(ctx.device);
  if (depthwise_handles(s)) {
    depthwise_backward_input(ctx, dtype, s, dy, w, dx);
    return;
  }
  if (pointwise(s)) {  // dx[M, C] = dy[M, K] w[K, C]
    gemm_tf32(ctx, dtype, false, false, s.n * s.h * s.w, s.c, s.k, dy, w, 0.0, dx,
              conv_allow_tf32());
    return;
  }
  ConvDescriptors d(s, dtype, "conv2d_backward_input");
  cudnnHandle_t h = cudnn_handle(ctx);
  float one = 1.0f, zero = 0.0f;
  run_conv(ctx, h, d, Direction::backward_data, dtype, s, {dx, w, dy}, {},
           [&](int algo, void* ws, size_t bytes) {
             return cudnnConvolutionBackwardData(h, &one, d.w, w, d.y, dy, d.conv,
                                                 static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                                 ws, bytes, &zero, d.x, dx);
           });
}

namespace {

// Runs write(out) for n values computed in `dtype` that belong in `dst` as `to`: straight into
// dst when the dtypes agree, else into a staged workspace cast afterwards (cuDNN's weight gradient
// and the bias sum only write their input dtype).
template <typename Write>
void write_in_dtype(const Context& ctx, DType dtype, DType to, int64_t n, void* dst, Write write) {
  if (to == dtype) {
    write(dst);
    return;
  }
  memory::DataPtr staged = ctx.workspace(static_cast<size_t>(n) * dtype_size(dtype));
  write(staged.get());
  cuda::cast(ctx, dtype, to, n, staged.get(), dst);
}

}  // namespace

namespace {

// conv2d_backward_weight, and conv2d_backward_weight_bn_act where depthwise_reads_bn_act (bn
// non-null: x is z, normalized in the depthwise kernel's loads).
void backward_weight(const Context& ctx, DType dtype, DType dw_dtype, const Conv2dShape& s,
                     const BnActInput* bn, const void* x, const void* dy, void* dw, void* dbias) {
  const char* op = "conv2d_backward_weight";
  cudaStream_t stream = stream_of(ctx, op);
  check_shape(s, op);
  cudnn_type(dtype, op);
  FRUGAL_CHECK(dw_dtype == dtype || dw_dtype == DType::f32, op, ": ", dtype, " inputs give dw in ",
               dtype, " or f32, not ", dw_dtype);
  DeviceGuard guard(ctx.device);
  if (s.n == 0) {  // an empty batch contributes nothing
    size_t esize = dtype_size(dw_dtype);
    size_t wbytes = static_cast<size_t>(s.k * s.kh * s.kw * s.cin_per_group()) * esize;
    if (wbytes > 0) CUDA_CHECK(cudaMemsetAsync(dw, 0, wbytes, stream));
    if (dbias != nullptr && s.k > 0) {
      CUDA_CHECK(cudaMemsetAsync(dbias, 0, static_cast<size_t>(s.k) * esize, stream));
    }
    return;
  }
  if (s.k == 0) return;
  const int64_t nw = s.k * s.kh * s.kw * s.cin_per_group();
  if (depthwise_handles(s)) {
    depthwise_backward_weight(ctx, dtype, dw_dtype, s, x, dy, dw, bn);
  } else if (dtype != DType::f32 && few_channel_handles(s)) {  // f32: cuDNN's is fast here
    few_channel_backward_weight(ctx, dtype, dw_dtype, s, x, dy, dw);
  } else if (stem_gemm_handles(dtype, s) && compute_major(ctx.device.index) >= 8) {  // TF32 wmma
    stem_gemm_backward_weight(ctx, s, static_cast<const float*>(x), static_cast<const float*>(dy),
                              static_cast<float*>(dw));
  } else if (pointwise(s)) {  // dw[K, C] = dy[M, K]^T x[M, C]
    gemm_tf32_out(ctx, dtype, dw_dtype, true, false, s.k, s.c, s.n * s.h * s.w, dy, x, 0.0, dw,
                  conv_allow_tf32());
  } else if (space_to_depth_handles(dtype, s)) {  // Note [Stride-2 stems as stride-1 ...]
    const SpaceToDepth r = space_to_depth(s);
    memory::DataPtr ws =
        ctx.workspace(cuda_conv_workspace_bytes(ConvPass::backward_weight, dtype, s),
                      memory::Category::conv_workspace);
    char* z = static_cast<char*>(ws.get());
    char* dw2 = z + space_to_depth_input_bytes(dtype, s);
    space_to_depth_input(ctx, dtype, s, r, x, z);
    cudnn_backward_weight(ctx, dtype, r.inner, z, dy, dw2,
                          {dw2 + space_to_depth_weight_bytes(dtype, s),
                           space_to_depth_inner_bound(ConvPass::backward_weight, dtype, s)});
    space_to_depth_weight_grad(ctx, dtype, dw_dtype, s, r, dw2, dw);
  } else {
    write_in_dtype(ctx, dtype, dw_dtype, nw, dw,
                   [&](void* out) { cudnn_backward_weight(ctx, dtype, s, x, dy, out, {}); });
  }
  if (dbias != nullptr) {
    const int64_t rows = s.n * s.oh() * s.ow();
    write_in_dtype(ctx, dtype, dw_dtype, s.k, dbias, [&](void* out) {
      cuda::sum_to(ctx, dtype, make_reduction(Shape{rows, s.k}, Shape{1, s.k}), dy, 1.0, out);
    });
  }
}

}  // namespace

void conv2d_backward_weight(const Context& ctx, DType dtype, DType dw_dtype, const Conv2dShape& s,
                            const void* x, const void* dy, void* dw, void* dbias) {
  backward_weight(ctx, dtype, dw_dtype, s, nullptr, x, dy, dw, dbias);
}

// Note [Batch norm inside the depthwise convolution] (kernels/conv.h).
void conv2d_backward_weight_bn_act(const Context& ctx, DType dtype, DType dw_dtype,
                                   const Conv2dShape& s, const BnActInput& in, const void* z,
                                   const void* dy, void* dw, void* dbias) {
  if (depthwise_reads_bn_act(dtype, s, in, {z, dy})) {
    backward_weight(ctx, dtype, dw_dtype, s, &in, z, dy, dw, dbias);
    return;
  }
  memory::DataPtr x = apply_bn_act(ctx, dtype, s, in, z);
  backward_weight(ctx, dtype, dw_dtype, s, nullptr, x.get(), dy, dw, dbias);
}

}  // namespace frugal::kernels::cuda
