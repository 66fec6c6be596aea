// Does cuDNN's graph API run MobileNetV2's 1x1 convolution forward as one kernel with the previous
// batch norm applied to its input (scale, shift, ReLU6) and its own batch norm's statistics summed
// from its output, and is that kernel faster than today's passes? The question behind issue 16's
// HBM goal after bench/fused_pointwise_probe.cu (bench/RESULTS.md, session 33): hand-written WMMA
// kernels that fuse the same work ran 0.72x of the passes around cuBLAS. cuDNN documents such a
// pattern (ConvBNfprop: scale, bias, ReLU, convolution, GenStats) for Ampere and Hopper with plain
// ReLU only; its runtime fusion engines take other prologues, with one reduction. This probe asks
// cuDNN 9 on the machine, graph by graph:
//   conv             the convolution alone (cuDNN's speed for the bare 1x1, against cuBLAS)
//   conv+stats       the convolution and GenStats (sum and sum of squares of y per channel)
//   relu6+conv+stats x * scale + shift, ReLU clipped at 6, then the above (MobileNetV2's form)
//   relu+conv+stats  the same with plain ReLU (the documented ConvBNfprop pattern)
//   affine+conv+stats x * scale + shift alone (the expansions' input, a batch norm without ReLU)
//   relu6+conv+sum   the ReLU6 prologue with one reduction (sum of y) in f32 scale and shift
// For each it prints the engines heuristics list, the fastest of the first plans that finalize
// (us a layer, median of CUDA graph replays that rotate among input sets larger than the L2), and
// the output's error against a host reference with ReLU6, with plain ReLU and with no activation:
// the smallest of the three tells which function the kernel computed, so a clip cuDNN ignores
// shows as a match with "relu". Sums are checked against the device's own y summed on the host in
// double. A standalone CUDA program, not linked with frugal; exits 1 on a CUDA error, never on a
// graph cuDNN declines (that is an answer, printed with cuDNN's reason).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cudnn_probe_graphs.cuh"
#include "probe_common.cuh"

namespace {

using namespace cudnn_probe;

using probe::check;
using probe::device_copy;

// In the order they run: the question first, in case the time runs out.
constexpr Variant kVariants[] = {
    {"relu6+conv+stats", Prologue::relu6, Epilogue::stats, CUDNN_DATA_HALF},
    {"relu+conv+stats", Prologue::relu, Epilogue::stats, CUDNN_DATA_HALF},
    {"conv+stats", Prologue::none, Epilogue::stats, CUDNN_DATA_HALF},
    {"affine+conv+stats", Prologue::affine, Epilogue::stats, CUDNN_DATA_HALF},
    {"relu6+conv+sum", Prologue::relu6, Epilogue::sum, CUDNN_DATA_FLOAT},
    {"conv", Prologue::none, Epilogue::none, CUDNN_DATA_HALF},
};

// ---- data, plans and their timing --------------------------------------------------------------

// One shape's data on the host (for the reference) and its input sets on the device.
struct Data {
  long rows;
  std::vector<__half> x, w;
  std::vector<float> scale, shift;  // as f32; the f16 copies hold the same rounded values
  struct Set {
    __half *x, *y;
    float *sum, *sqsum;
  };
  std::vector<Set> sets;  // enough to keep the working set over twice the 50 MB L2
  __half *w_dev, *scale16, *shift16;
  float *scale32, *shift32;
};

// Values of x * scale + shift spread over [-10, 12], so that ReLU's floor and ReLU6's ceiling
// both bite.
Data make_data(const Shape& s, std::mt19937& gen) {
  Data d;
  d.rows = long{kBatch} * s.hw * s.hw;
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), pos(0.5f, 2.0f), off(-2.0f, 4.0f);
  d.x.resize(d.rows * s.k);
  for (__half& v : d.x) v = __float2half(4.0f * unit(gen));
  d.w.resize(long{s.n} * s.k);
  for (__half& v : d.w) v = __float2half(unit(gen) / std::sqrt(float(s.k)));
  std::vector<__half> scale16(s.k), shift16(s.k);
  for (int c = 0; c < s.k; ++c) {
    scale16[c] = __float2half(pos(gen));
    shift16[c] = __float2half(off(gen));
    d.scale.push_back(__half2float(scale16[c]));
    d.shift.push_back(__half2float(shift16[c]));
  }
  d.w_dev = device_copy(d.w);
  d.scale16 = device_copy(scale16);
  d.shift16 = device_copy(shift16);
  d.scale32 = device_copy(d.scale);
  d.shift32 = device_copy(d.shift);
  const double bytes = double(d.rows) * (s.k + s.n) * sizeof(__half);
  const int sets = std::clamp(static_cast<int>(std::ceil(100e6 / bytes)), 1, 8);
  for (int i = 0; i < sets; ++i) {
    Data::Set set;
    set.x = device_copy(d.x);
    check(cudaMalloc(&set.y, d.rows * s.n * sizeof(__half)), "malloc y");
    check(cudaMalloc(&set.sum, s.n * sizeof(float)), "malloc sum");
    check(cudaMalloc(&set.sqsum, s.n * sizeof(float)), "malloc sqsum");
    d.sets.push_back(set);
  }
  return d;
}

void free_data(Data& d) {
  for (Data::Set& s : d.sets) {
    cudaFree(s.x);
    cudaFree(s.y);
    cudaFree(s.sum);
    cudaFree(s.sqsum);
  }
  cudaFree(d.w_dev);
  cudaFree(d.scale16);
  cudaFree(d.shift16);
  cudaFree(d.scale32);
  cudaFree(d.shift32);
}

// Runs `plan` on input set `set`; the pack names only the tensors the variant has.
cudnnStatus_t execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const Variant& v,
                      const Data& d, const Data::Set& set, void* workspace) {
  std::vector<int64_t> uids = {kX, kW, kY};
  std::vector<void*> ptrs = {set.x, d.w_dev, set.y};
  if (v.prologue != Prologue::none) {
    const bool half = v.scale_type == CUDNN_DATA_HALF;
    uids.insert(uids.end(), {kScale, kShift});
    ptrs.push_back(half ? static_cast<void*>(d.scale16) : d.scale32);
    ptrs.push_back(half ? static_cast<void*>(d.shift16) : d.shift32);
  }
  if (v.epilogue != Epilogue::none) {
    uids.push_back(kSum);
    ptrs.push_back(set.sum);
  }
  if (v.epilogue == Epilogue::stats) {
    uids.push_back(kSqSum);
    ptrs.push_back(set.sqsum);
  }
  Builder b;
  cudnnBackendDescriptor_t pack = b.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "pack");
  const auto n = static_cast<int64_t>(uids.size());
  b.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data(), "pack ids");
  b.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs.data(), "ptrs");
  b.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "workspace");
  b.finalize(pack, "pack finalize");
  if (!b.good()) return CUDNN_STATUS_BAD_PARAM;
  return cudnnBackendExecute(h, plan, pack);
}

// Microseconds a layer: the median of 7 timings of 10 replays of a CUDA graph that runs the plan
// once on each input set. A plan that cannot be captured is timed from direct launches instead
// (`captured` false: its time includes cuDNN's host work where that exceeds the kernel's); -1
// when it will not run at all.
float time_plan(cudnnHandle_t h, cudaStream_t st, cudnnBackendDescriptor_t plan, const Variant& v,
                const Data& d, void* workspace, bool& captured) {
  auto run_sets = [&] {
    bool ran = true;
    for (const Data::Set& set : d.sets) {
      ran &= execute(h, plan, v, d, set, workspace) == CUDNN_STATUS_SUCCESS;
    }
    return ran;
  };
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  const bool ran = run_sets();
  const cudaError_t ended = cudaStreamEndCapture(st, &graph);
  captured = ran && ended == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (!captured) {
    cudaGetLastError();  // clears the failed capture
    if (!run_sets() || cudaStreamSynchronize(st) != cudaSuccess) return -1.0f;
  }
  auto once = [&] {
    if (captured) {
      check(cudaGraphLaunch(exec, st), "replay");
    } else {
      run_sets();
    }
  };
  once();
  check(cudaStreamSynchronize(st), "warm-up");
  const float us = probe::median_us(st, d.sets.size(), once);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  return us;
}

// ---- the reference ----------------------------------------------------------------------------

struct Errors {
  double relu6 = 0, relu = 0, none = 0;  // y against each reference, relative to its largest |y|
  double sum = -1, sqsum = -1;           // the sums against y summed on the host; -1 unchecked
  bool accumulates = false;              // a second run added to the sums instead of writing them
};

// y on the device (set 0, after one run) against host references on every 97th row, and the sums
// against y itself. `sums_once` holds the sums after the first run, `sums_twice` after a second
// run with nothing cleared between.
Errors compare(const Shape& s, const Variant& v, const Data& d, const std::vector<__half>& y,
               const std::vector<float>& sums_once, const std::vector<float>& sums_twice) {
  Errors e;
  double largest[3] = {}, worst[3] = {};
  std::vector<float> a(s.k);
  for (long r = 0; r < d.rows; r += 97) {
    for (int mode = 0; mode < 3; ++mode) {  // ReLU6, ReLU, none
      for (int c = 0; c < s.k; ++c) {
        float t = __half2float(d.x[r * s.k + c]);
        if (v.prologue != Prologue::none) t = t * d.scale[c] + d.shift[c];
        if (v.prologue != Prologue::none && v.prologue != Prologue::affine && mode < 2) {
          t = std::max(t, 0.0f);
          if (mode == 0) t = std::min(t, 6.0f);
        }
        a[c] = __half2float(__float2half(t));
      }
      for (int n = 0; n < s.n; ++n) {
        double ref = 0;
        for (int c = 0; c < s.k; ++c) ref += double(a[c]) * __half2float(d.w[long{n} * s.k + c]);
        largest[mode] = std::max(largest[mode], std::abs(ref));
        worst[mode] = std::max(worst[mode], std::abs(ref - __half2float(y[r * s.n + n])));
      }
    }
  }
  e.relu6 = worst[0] / std::max(largest[0], 1e-30);
  e.relu = worst[1] / std::max(largest[1], 1e-30);
  e.none = worst[2] / std::max(largest[2], 1e-30);
  if (v.epilogue == Epilogue::none) return e;
  std::vector<double> first(s.n, 0.0), second(s.n, 0.0);
  for (long r = 0; r < d.rows; ++r) {
    for (int n = 0; n < s.n; ++n) {
      const double t = __half2float(y[r * s.n + n]);
      first[n] += t;
      second[n] += t * t;
    }
  }
  double big1 = 0, big2 = 0, err1 = 0, err2 = 0;
  for (int n = 0; n < s.n; ++n) {
    big1 = std::max(big1, std::abs(first[n]));
    big2 = std::max(big2, second[n]);
    err1 = std::max(err1, std::abs(first[n] - sums_once[n]));
    if (v.epilogue == Epilogue::stats)
      err2 = std::max(err2, std::abs(second[n] - sums_once[s.n + n]));
    e.accumulates |=
        std::abs(sums_twice[n] - 2.0 * sums_once[n]) < std::abs(sums_twice[n] - sums_once[n]);
  }
  e.sum = err1 / std::max(big1, 1e-30);
  if (v.epilogue == Epilogue::stats) e.sqsum = err2 / std::max(big2, 1e-30);
  return e;
}

// One variant at one shape: heuristics, then up to `max_plans` plans of distinct engines, each
// timed; the fastest is run once more on input set 0 and checked.
std::string run_variant(cudnnHandle_t h, cudaStream_t st, const Variant& v, const Shape& s,
                        const Data& d, int max_plans, float& best_us) {
  best_us = -1;
  Builder graph_b;
  cudnnBackendDescriptor_t graph = operation_graph(graph_b, h, v, s);
  if (graph == nullptr) return "declined: " + graph_b.failure();
  std::vector<cudnnBackendDescriptor_t> cfgs = engine_configs(graph_b, graph, CUDNN_HEUR_MODE_A);
  for (auto c : engine_configs(graph_b, graph, CUDNN_HEUR_MODE_FALLBACK)) cfgs.push_back(c);
  if (cfgs.empty()) return "no engine configuration listed";

  struct Plan {
    std::unique_ptr<Builder> owner;
    cudnnBackendDescriptor_t plan = nullptr;
    int64_t workspace = 0, engine = -1;
    bool runtime = false, captured = false;
  } best;
  int planned = 0;
  std::string failure;
  std::vector<int64_t> seen;
  for (size_t i = 0; i < cfgs.size() && planned < max_plans; ++i) {
    Plan p;
    std::tie(p.engine, p.runtime) = engine_of(cfgs[i]);
    if (std::find(seen.begin(), seen.end(), p.engine) != seen.end()) continue;
    seen.push_back(p.engine);
    p.owner = std::make_unique<Builder>();
    p.plan = p.owner->make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
    p.owner->set(p.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
    p.owner->set(p.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, kDesc, 1, &cfgs[i], "plan cfg");
    p.owner->finalize(p.plan, "plan finalize");
    int64_t n = 0;
    if (!p.owner->good() ||
        cudnnBackendGetAttribute(p.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                 1, &n, &p.workspace) != CUDNN_STATUS_SUCCESS) {
      if (failure.empty()) failure = p.owner->failure();
      continue;
    }
    ++planned;
    void* ws = nullptr;
    if (p.workspace > 0) check(cudaMalloc(&ws, p.workspace), "workspace");
    const float us = time_plan(h, st, p.plan, v, d, ws, p.captured);
    if (ws != nullptr) check(cudaFree(ws), "free workspace");
    if (us > 0 && (best_us < 0 || us < best_us)) {
      best_us = us;
      best = std::move(p);
    }
  }
  char buf[640];
  if (best_us < 0) {
    std::snprintf(buf, sizeof buf, "%zu configurations, %d planned, none ran%s%s", cfgs.size(),
                  planned, failure.empty() ? "" : ": ", failure.c_str());
    return buf;
  }

  // The check: one run with the sums cleared, then one more without clearing them.
  const Data::Set& set = d.sets[0];
  void* ws = nullptr;
  if (best.workspace > 0) check(cudaMalloc(&ws, best.workspace), "workspace");
  std::vector<float> once(2 * s.n), twice(2 * s.n);
  std::vector<__half> y(d.rows * s.n);
  check(cudaMemset(set.sum, 0, s.n * sizeof(float)), "clear");
  check(cudaMemset(set.sqsum, 0, s.n * sizeof(float)), "clear");
  const bool ran = execute(h, best.plan, v, d, set, ws) == CUDNN_STATUS_SUCCESS;
  check(cudaStreamSynchronize(st), "reference run");
  check(cudaMemcpy(y.data(), set.y, y.size() * sizeof(__half), cudaMemcpyDeviceToHost), "y");
  check(cudaMemcpy(once.data(), set.sum, s.n * sizeof(float), cudaMemcpyDeviceToHost), "sum");
  check(cudaMemcpy(once.data() + s.n, set.sqsum, s.n * sizeof(float), cudaMemcpyDeviceToHost),
        "sq");
  const bool again = execute(h, best.plan, v, d, set, ws) == CUDNN_STATUS_SUCCESS;
  check(cudaStreamSynchronize(st), "second run");
  check(cudaMemcpy(twice.data(), set.sum, s.n * sizeof(float), cudaMemcpyDeviceToHost), "sum");
  if (ws != nullptr) check(cudaFree(ws), "free workspace");
  if (!ran || !again) return "the fastest plan failed outside a graph";
  const Errors e = compare(s, v, d, y, once, twice);
  std::snprintf(
      buf, sizeof buf,
      "%8.1f us%s  engine %3lld%s  (%zu configs, %d planned)  y err: relu6 %.1e relu %.1e "
      "none %.1e",
      best_us, best.captured ? "" : " uncaptured", static_cast<long long>(best.engine),
      best.runtime ? " rtc" : "    ", cfgs.size(), planned, e.relu6, e.relu, e.none);
  std::string line = buf;
  if (e.sum >= 0) {
    std::snprintf(buf, sizeof buf, "  sum err %.1e", e.sum);
    line += buf;
  }
  if (e.sqsum >= 0) {
    std::snprintf(buf, sizeof buf, "  sqsum err %.1e", e.sqsum);
    line += buf;
  }
  if (e.accumulates) line += "  (sums accumulate)";
  return line;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

int main() {
  // FUSION_PROBE_SECONDS: no new shape starts after this many seconds (a device call is capped);
  // FUSION_PROBE_PLANS: plans of distinct engines timed per graph.
  const int seconds = env_int("FUSION_PROBE_SECONDS", 420);
  const int max_plans = env_int("FUSION_PROBE_PLANS", 2);
  const auto t0 = std::chrono::steady_clock::now();
  cudnnHandle_t h;
  if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "cudnn_fusion_probe: cudnnCreate failed\n");
    return 1;
  }
  cudaStream_t st;
  check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  cudnnSetStream(h, st);
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("%s, cuDNN %zu: MobileNetV2's 1x1 convolution forward, f16, batch %d, 224x224\n",
              prop.name, cudnnGetVersion(), kBatch);
  std::printf(
      "us a layer (median of 7 x 10 graph replays); rtc: runtime-compiled engine; y err "
      "against each activation's reference, relative to its largest |y|\n");

  constexpr int kVariantCount = sizeof kVariants / sizeof kVariants[0];
  std::vector<double> total(kVariantCount, 0.0);
  std::vector<bool> complete(kVariantCount, true);
  int layers = 0;
  std::mt19937 gen(33);
  for (const Shape& s : probe::kMobileNetV2Pointwise) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed > seconds) {
      std::printf("-- stopped after %.0f s: later shapes not run\n", elapsed);
      break;
    }
    Data d = make_data(s, gen);
    std::printf("\n%d x %d x %d x %d -> %d (%s input, %d layer%s)\n", kBatch, s.hw, s.hw, s.k, s.n,
                s.relu6 ? "ReLU6" : "batch norm", s.count, s.count > 1 ? "s" : "");
    for (int i = 0; i < kVariantCount; ++i) {
      float us = -1;
      const std::string line = run_variant(h, st, kVariants[i], s, d, max_plans, us);
      std::printf("  %-18s %s\n", kVariants[i].name, line.c_str());
      std::fflush(stdout);
      if (us > 0) {
        total[i] += double(us) * s.count;
      } else {
        complete[i] = false;
      }
    }
    layers += s.count;
    free_data(d);
  }
  std::printf("\nover %d layers (us; 'partial' where some shape had no plan that ran):\n", layers);
  for (int i = 0; i < kVariantCount; ++i) {
    std::printf("  %-18s %9.1f%s\n", kVariants[i].name, total[i], complete[i] ? "" : " partial");
  }
  cudnnDestroy(h);
  return 0;
}
