// Which cuDNN kernels can run a convolution, and how fast: the candidates of cuDNN's legacy API
// (cudnnGet*Algorithm_v7, the list kernels/cuda/conv.cu benchmarks) beside the engine
// configurations of its graph API (heuristics mode A, then the fallback list: the sources
// PyTorch's cudnn.benchmark draws on). The question behind it (bench/RESULTS.md, session 27):
// frugal's replayed bf16 ResNet-18 step is 0.9 ms slower than its f16 one because the legacy
// API offers bf16 slower kernels (the 7x7 stem's forward 0.90 ms against 0.43 in f16, its weight
// gradient 0.58 against 0.30). If the graph API has bf16 engines as fast as f16's, conv.cu should
// take its candidates from there. A standalone CUDA program linked with cuDNN, not with frugal.
//
//   cudnn_engines_probe [--dtype bf16|f16|f32] [--conv N,H,W,C,K,R,S,STRIDE,PAD[,COUNT]]...
//                       [--pass fprop|dgrad|wgrad]... [--heuristics MAX]
// Without --conv: ResNet-18's eleven convolution shapes at batch 128, 224x224, each with its count
// in the network (the stem without an input gradient). Tensors are NHWC, filters KRSC, as frugal
// keeps them. Each candidate runs 3 times, then 10 timed with CUDA events; a line gives its source,
// workspace, median ms and its largest difference from the reference output (the first legacy
// candidate's), relative to the reference's largest magnitude. Per shape and pass, the fastest of
// each API; at the end the two totals over the network, each shape times its count.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cudnn_engines_probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "cudnn_engines_probe: %s: %s\n", what, cudnnGetErrorString(s));
    std::exit(1);
  }
}

// ---------------------------------------------------------------------------------------------
// The problem: one convolution shape, one pass, one element type.

struct Conv {
  int64_t n, h, w, c, k, r, s, stride, pad, count;
  int64_t p() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t q() const { return (w + 2 * pad - s) / stride + 1; }
  int64_t x_elems() const { return n * h * w * c; }
  int64_t w_elems() const { return k * r * s * c; }
  int64_t y_elems() const { return n * p() * q() * k; }
  std::string str() const {
    char b[128];
    std::snprintf(b, sizeof b, "%lldx%lldx%lldx%lld -> %lld, %lldx%lld s%lld p%lld", (long long)n,
                  (long long)h, (long long)w, (long long)c, (long long)k, (long long)r,
                  (long long)s, (long long)stride, (long long)pad);
    return b;
  }
};

enum class Pass { fprop, dgrad, wgrad };
const char* pass_name(Pass p) {
  return p == Pass::fprop ? "fprop" : p == Pass::dgrad ? "dgrad" : "wgrad";
}

struct Type {
  const char* name;
  cudnnDataType_t cudnn;
  size_t bytes;
};

// Element i of a tensor of type t as a float (the comparison kernel reads every type).
__device__ float load(const void* p, int64_t i, cudnnDataType_t t) {
  if (t == CUDNN_DATA_HALF) return __half2float(static_cast<const __half*>(p)[i]);
  if (t == CUDNN_DATA_BFLOAT16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// Uniform values in [-1, 1) from a hash of the index: the same data on every run.
__global__ void fill_kernel(void* p, int64_t n, cudnnDataType_t t, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t v = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    v ^= v >> 15;
    v *= 2246822519u;
    v ^= v >> 13;
    const float f = static_cast<float>(v >> 8) * (2.0f / 16777216.0f) - 1.0f;
    if (t == CUDNN_DATA_HALF) {
      static_cast<__half*>(p)[i] = __float2half(f);
    } else if (t == CUDNN_DATA_BFLOAT16) {
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(f);
    } else {
      static_cast<float*>(p)[i] = f;
    }
  }
}

// out[0] = max |a - b|, out[1] = max |b|, as float bits (non-negative floats order as integers).
__global__ void diff_kernel(const void* a, const void* b, int64_t n, cudnnDataType_t t,
                            unsigned* out) {
  float d = 0, m = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = load(a, i, t), y = load(b, i, t);
    d = fmaxf(d, isfinite(x) ? fabsf(x - y) : INFINITY);
    m = fmaxf(m, fabsf(y));
  }
  atomicMax(out, __float_as_uint(d));
  atomicMax(out + 1, __float_as_uint(m));
}

struct Buffers {
  void *x = nullptr, *w = nullptr, *dy = nullptr, *out = nullptr, *ref = nullptr;
  void* workspace = nullptr;
  unsigned* diff = nullptr;
};

constexpr size_t kWorkspaceCap = size_t{1} << 30;  // candidates asking more are listed, not run

// Times `launch` (returns a cuDNN status): median ms of 10 runs after 3, or a negative value
// when a run fails.
template <typename Launch>
double time_ms(Launch launch) {
  for (int i = 0; i < 3; ++i) {
    if (launch() != CUDNN_STATUS_SUCCESS) return -1;
  }
  check_cuda(cudaDeviceSynchronize(), "warm-up");
  static cudaEvent_t start = nullptr, stop = nullptr;  // made once, kept for the program's life
  if (start == nullptr) {
    check_cuda(cudaEventCreate(&start), "event");
    check_cuda(cudaEventCreate(&stop), "event");
  }
  std::vector<float> ms;
  for (int i = 0; i < 10; ++i) {
    check_cuda(cudaEventRecord(start), "record");
    if (launch() != CUDNN_STATUS_SUCCESS) return -1;
    check_cuda(cudaEventRecord(stop), "record");
    check_cuda(cudaEventSynchronize(stop), "sync");
    float t = 0;
    check_cuda(cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The largest |out - ref| relative to the largest |ref|.
double relative_diff(const Buffers& b, int64_t n, const Type& t) {
  check_cuda(cudaMemset(b.diff, 0, 2 * sizeof(unsigned)), "memset");
  diff_kernel<<<1024, 256>>>(b.out, b.ref, n, t.cudnn, b.diff);
  unsigned host[2];
  check_cuda(cudaMemcpy(host, b.diff, sizeof host, cudaMemcpyDeviceToHost), "diff");
  float d, m;
  std::memcpy(&d, &host[0], sizeof d);
  std::memcpy(&m, &host[1], sizeof m);
  return m > 0 ? d / m : d;
}

int64_t out_elems(const Conv& c, Pass p) {
  return p == Pass::fprop ? c.y_elems() : p == Pass::dgrad ? c.x_elems() : c.w_elems();
}

struct Best {
  double ms = -1;
  std::string what;
  void offer(double t, const std::string& w) {
    if (t >= 0 && (ms < 0 || t < ms)) {
      ms = t;
      what = w;
    }
  }
};

// One candidate measured: time, then compare with the reference (or become it).
template <typename Launch>
void measure(const char* source, const std::string& label, size_t workspace, const Conv& c, Pass p,
             const Type& t, Buffers& b, bool& have_ref, Best& best, Launch launch) {
  if (workspace > kWorkspaceCap) {
    std::printf("  %-8s %-34s ws %8.1f MiB  not run (over the %zu MiB cap)\n", source,
                label.c_str(), workspace / 1048576.0, kWorkspaceCap >> 20);
    return;
  }
  const int64_t n = out_elems(c, p);
  check_cuda(cudaMemset(b.out, 0, n * t.bytes), "memset");
  const double ms = time_ms(launch);
  check_cuda(cudaDeviceSynchronize(), "candidate");
  if (ms < 0) {
    std::printf("  %-8s %-34s ws %8.1f MiB  failed to run\n", source, label.c_str(),
                workspace / 1048576.0);
    return;
  }
  if (!have_ref) {
    check_cuda(cudaMemcpy(b.ref, b.out, n * t.bytes, cudaMemcpyDeviceToDevice), "reference");
    have_ref = true;
  }
  const double diff = relative_diff(b, n, t);
  // 16-bit outputs round at 2^-8 (bf16) of their magnitude; orders of summation differ by more
  // than one rounding, a wrong kernel by orders of magnitude.
  const bool wrong = !(diff < 0.05);
  std::printf("  %-8s %-34s ws %8.1f MiB  %8.3f ms  diff %.2e%s\n", source, label.c_str(),
              workspace / 1048576.0, ms, diff, wrong ? "  WRONG" : "");
  if (!wrong) best.offer(ms, std::string(source) + " " + label);
}

// ---------------------------------------------------------------------------------------------
// The legacy API: cudnnGet*Algorithm_v7's list, each entry with the math type it names.

struct LegacyDescriptors {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  LegacyDescriptors(const Conv& c, const Type& t) {
    check_cudnn(cudnnCreateTensorDescriptor(&x), "tensor");
    check_cudnn(cudnnCreateTensorDescriptor(&y), "tensor");
    check_cudnn(cudnnCreateFilterDescriptor(&w), "filter");
    check_cudnn(cudnnCreateConvolutionDescriptor(&conv), "conv");
    check_cudnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, t.cudnn, c.n, c.c, c.h, c.w), "x");
    check_cudnn(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, t.cudnn, c.n, c.k, c.p(), c.q()),
                "y");
    check_cudnn(cudnnSetFilter4dDescriptor(w, t.cudnn, CUDNN_TENSOR_NHWC, c.k, c.c, c.r, c.s), "w");
    check_cudnn(cudnnSetConvolution2dDescriptor(conv, c.pad, c.pad, c.stride, c.stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "conv");
  }
  ~LegacyDescriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

struct LegacyCandidate {
  int algo;
  cudnnMathType_t math;
};

std::vector<LegacyCandidate> legacy_candidates(cudnnHandle_t h, const LegacyDescriptors& d,
                                               Pass p) {
  std::vector<LegacyCandidate> out;
  int got = 0;
  auto take = [&](const auto* perf) {
    for (int i = 0; i < got; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS)
        out.push_back({static_cast<int>(perf[i].algo), perf[i].mathType});
    }
  };
  if (p == Pass::fprop) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(
                    h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf),
                "forward heuristics");
    take(perf);
  } else if (p == Pass::dgrad) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                    h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf),
                "backward data heuristics");
    take(perf);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                    h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf),
                "backward filter heuristics");
    take(perf);
  }
  return out;
}

void run_legacy(cudnnHandle_t h, const Conv& c, Pass p, const Type& t, Buffers& b, bool& have_ref,
                Best& best) {
  LegacyDescriptors d(c, t);
  const float one = 1, zero = 0;
  for (const LegacyCandidate& cand : legacy_candidates(h, d, p)) {
    check_cudnn(cudnnSetConvolutionMathType(d.conv, cand.math), "math type");
    size_t ws = 0;
    cudnnStatus_t st;
    if (p == Pass::fprop) {
      st = cudnnGetConvolutionForwardWorkspaceSize(
          h, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(cand.algo), &ws);
    } else if (p == Pass::dgrad) {
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(cand.algo), &ws);
    } else {
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(cand.algo), &ws);
    }
    if (st != CUDNN_STATUS_SUCCESS) continue;
    char label[64];
    std::snprintf(label, sizeof label, "algo %d math %d", cand.algo, static_cast<int>(cand.math));
    measure("legacy", label, ws, c, p, t, b, have_ref, best, [&] {
      if (p == Pass::fprop) {
        return cudnnConvolutionForward(h, &one, d.x, b.x, d.w, b.w, d.conv,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(cand.algo),
                                       b.workspace, ws, &zero, d.y, b.out);
      }
      if (p == Pass::dgrad) {
        return cudnnConvolutionBackwardData(h, &one, d.w, b.w, d.y, b.dy, d.conv,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(cand.algo),
                                            b.workspace, ws, &zero, d.x, b.out);
      }
      return cudnnConvolutionBackwardFilter(h, &one, d.x, b.x, d.y, b.dy, d.conv,
                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(cand.algo),
                                            b.workspace, ws, &zero, d.w, b.out);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// The graph API: one convolution operation in an operation graph, its engine configurations from
// heuristics mode A and the fallback list, one execution plan each.

// A backend descriptor owned for its scope.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check_cudnn(cudnnBackendCreateDescriptor(type, &d_), "create descriptor");
  }
  ~Desc() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  const cudnnBackendDescriptor_t* addr() const { return &d_; }
  template <typename T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const T* values, const char* what) {
    check_cudnn(cudnnBackendSetAttribute(d_, name, type, count, values), what);
  }
  void finalize(const char* what) { check_cudnn(cudnnBackendFinalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// NHWC data as the graph API describes it: dimensions in NCHW order, strides of NHWC.
Desc tensor(int64_t uid, const Type& t, int64_t n, int64_t c, int64_t h, int64_t w) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w};
  const int64_t strides[4] = {h * w * c, 1, w * c, c};
  const int64_t alignment = 16;
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.cudnn, "tensor type");
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
  d.finalize("tensor");
  return d;
}

constexpr int64_t kX = 'x', kW = 'w', kY = 'y';

// The operation graph of pass p over c, with its three tensors kept alive beside it.
struct Graph {
  std::vector<Desc> parts;
  Desc graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
};

Graph make_graph(cudnnHandle_t h, const Conv& c, Pass p, const Type& t) {
  Graph g;
  g.parts.push_back(tensor(kX, t, c.n, c.c, c.h, c.w));
  g.parts.push_back(tensor(kW, t, c.k, c.c, c.r, c.s));
  g.parts.push_back(tensor(kY, t, c.n, c.k, c.p(), c.q()));
  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, ones[2] = {1, 1}, strides[2] = {c.stride, c.stride},
                pads[2] = {c.pad, c.pad};
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "conv compute");
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "conv mode");
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "conv dims");
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones, "conv dilations");
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides, "conv strides");
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads, "conv pre-padding");
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads, "conv post-padding");
  conv.finalize("conv descriptor");

  const float alpha = 1, beta = 0;
  const cudnnBackendDescriptor_t x = g.parts[0].get(), w = g.parts[1].get(), y = g.parts[2].get();
  const cudnnBackendDescriptor_t cd = conv.get();
  const auto D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  // The operation's descriptor type and attribute names, by pass: the x, w and y slots hold dx in
  // the input gradient and dw in the weight gradient.
  struct OpAttrs {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  const OpAttrs a =
      p == Pass::fprop   ? OpAttrs{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA}
      : p == Pass::dgrad ? OpAttrs{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA}
                         : OpAttrs{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  Desc op(a.type);
  op.set(a.x, D, 1, &x, "op x");
  op.set(a.w, D, 1, &w, "op w");
  op.set(a.y, D, 1, &y, "op y");
  op.set(a.conv, D, 1, &cd, "op conv");
  op.set(a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha, "op alpha");
  op.set(a.beta, CUDNN_TYPE_FLOAT, 1, &beta, "op beta");
  op.finalize(pass_name(p));
  const cudnnBackendDescriptor_t ops = op.get();
  g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, D, 1, &ops, "graph ops");
  g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
  g.graph.finalize("operation graph");
  g.parts.push_back(std::move(conv));
  g.parts.push_back(std::move(op));
  return g;
}

// The engine configurations heuristics `mode` lists for the graph, at most `max` of them.
std::vector<Desc> engine_configs(const Graph& g, cudnnBackendHeurMode_t mode, int64_t max) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, g.graph.addr(),
           "heuristics graph");
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  check_cudnn(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
              "heuristics count");
  count = std::min(count, max);
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  if (count > 0) {
    check_cudnn(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
                "heuristics results");
  }
  cfgs.erase(cfgs.begin() + std::min(got, count), cfgs.end());
  return cfgs;
}

// "engine G" and its numerical notes: tc (tensor cores), dc (inputs converted down), rp
// (reduced-precision reduction), nd (nondeterministic), fft, wino.
std::string describe(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0, index = -1;
  cudnnBackendDescriptor_t e = engine.get();
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) != CUDNN_STATUS_SUCCESS) {
    return "engine ?";
  }
  cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t got = 0;
  std::string s = "engine " + std::to_string(index);
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got,
                               notes) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < got; ++i) {
      switch (notes[i]) {
        case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
          s += " tc";
          break;
        case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
          s += " dc";
          break;
        case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
          s += " rp";
          break;
        case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
          s += " nd";
          break;
        case CUDNN_NUMERICAL_NOTE_FFT:
          s += " fft";
          break;
        case CUDNN_NUMERICAL_NOTE_WINOGRAD:
          s += " wino";
          break;
        default:
          break;
      }
    }
  }
  return s;
}

void run_graph(cudnnHandle_t h, const Conv& c, Pass p, const Type& t, Buffers& b, bool& have_ref,
               Best& best, int64_t max_heuristics) {
  Graph g = make_graph(h, c, p, t);
  const int64_t uids[3] = {kX, kW, kY};
  void* pointers[3] = {b.x, b.w, b.dy};
  if (p == Pass::fprop) pointers[2] = b.out;
  if (p == Pass::dgrad) pointers[0] = b.out;
  if (p == Pass::wgrad) pointers[1] = b.out;
  const struct {
    cudnnBackendHeurMode_t mode;
    const char* name;
    int64_t max;
  } sources[] = {{CUDNN_HEUR_MODE_A, "heur A", max_heuristics},
                 {CUDNN_HEUR_MODE_FALLBACK, "fallback", 64}};
  for (const auto& src : sources) {
    int rank = 0;
    for (const Desc& cfg : engine_configs(g, src.mode, src.max)) {
      ++rank;
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               cfg.addr(), "plan config");
      const std::string label = "#" + std::to_string(rank) + " " + describe(cfg);
      if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) {
        std::printf("  %-8s %-34s not supported\n", src.name, label.c_str());
        continue;
      }
      int64_t ws = 0, n = 0;
      check_cudnn(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                           CUDNN_TYPE_INT64, 1, &n, &ws),
                  "plan workspace");
      Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      void* workspace = b.workspace;
      pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, "pack ids");
      pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers,
               "pack pointers");
      pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
               "pack workspace");
      pack.finalize("variant pack");
      measure(src.name, label, static_cast<size_t>(ws), c, p, t, b, have_ref, best,
              [&] { return cudnnBackendExecute(h, plan.get(), pack.get()); });
    }
  }
}

// ---------------------------------------------------------------------------------------------

std::vector<Conv> resnet18_convs() {
  // N, H, W, C, K, R, S, stride, pad, count in the network
  return {{128, 224, 224, 3, 64, 7, 7, 2, 3, 1},  {128, 56, 56, 64, 64, 3, 3, 1, 1, 4},
          {128, 56, 56, 64, 128, 3, 3, 2, 1, 1},  {128, 28, 28, 128, 128, 3, 3, 1, 1, 3},
          {128, 56, 56, 64, 128, 1, 1, 2, 0, 1},  {128, 28, 28, 128, 256, 3, 3, 2, 1, 1},
          {128, 14, 14, 256, 256, 3, 3, 1, 1, 3}, {128, 28, 28, 128, 256, 1, 1, 2, 0, 1},
          {128, 14, 14, 256, 512, 3, 3, 2, 1, 1}, {128, 7, 7, 512, 512, 3, 3, 1, 1, 3},
          {128, 14, 14, 256, 512, 1, 1, 2, 0, 1}};
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "cudnn_engines_probe: %s\nusage: cudnn_engines_probe [--dtype bf16|f16|f32] "
               "[--conv N,H,W,C,K,R,S,STRIDE,PAD[,COUNT]]... [--pass fprop|dgrad|wgrad]... "
               "[--heuristics MAX]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Type type{"bf16", CUDNN_DATA_BFLOAT16, 2};
  std::vector<Conv> convs;
  std::vector<Pass> passes;
  int64_t max_heuristics = 24;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing the value of " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--dtype") {
      if (v == "bf16")
        type = {"bf16", CUDNN_DATA_BFLOAT16, 2};
      else if (v == "f16")
        type = {"f16", CUDNN_DATA_HALF, 2};
      else if (v == "f32")
        type = {"f32", CUDNN_DATA_FLOAT, 4};
      else
        usage(("unknown --dtype " + v).c_str());
    } else if (a == "--conv") {
      long long f[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      const int got =
          std::sscanf(v.c_str(), "%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld", &f[0], &f[1],
                      &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9]);
      if (got < 9) usage(("--conv wants N,H,W,C,K,R,S,STRIDE,PAD[,COUNT], got " + v).c_str());
      Conv c{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]};
      if (c.n < 1 || c.c < 1 || c.k < 1 || c.stride < 1 || c.pad < 0 || c.p() < 1 || c.q() < 1)
        usage(("--conv " + v + " has no output").c_str());
      convs.push_back(c);
    } else if (a == "--pass") {
      if (v == "fprop")
        passes.push_back(Pass::fprop);
      else if (v == "dgrad")
        passes.push_back(Pass::dgrad);
      else if (v == "wgrad")
        passes.push_back(Pass::wgrad);
      else
        usage(("unknown --pass " + v).c_str());
    } else if (a == "--heuristics") {
      max_heuristics = std::atoll(v.c_str());
      if (max_heuristics < 1) usage("--heuristics wants a count >= 1");
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  const bool network = convs.empty();
  if (network) convs = resnet18_convs();
  if (passes.empty()) passes = {Pass::fprop, Pass::dgrad, Pass::wgrad};

  cudnnHandle_t h;
  check_cudnn(cudnnCreate(&h), "cudnnCreate");
  std::printf("cuDNN %zu, %s, heuristics mode A: first %lld configurations\n", cudnnGetVersion(),
              type.name, static_cast<long long>(max_heuristics));
  double legacy_total = 0, graph_total = 0;
  for (const Conv& c : convs) {
    Buffers b;
    const int64_t largest = std::max({c.x_elems(), c.w_elems(), c.y_elems()});
    check_cuda(cudaMalloc(&b.x, c.x_elems() * type.bytes), "malloc x");
    check_cuda(cudaMalloc(&b.w, c.w_elems() * type.bytes), "malloc w");
    check_cuda(cudaMalloc(&b.dy, c.y_elems() * type.bytes), "malloc dy");
    check_cuda(cudaMalloc(&b.out, largest * type.bytes), "malloc out");
    check_cuda(cudaMalloc(&b.ref, largest * type.bytes), "malloc ref");
    check_cuda(cudaMalloc(&b.workspace, kWorkspaceCap), "malloc workspace");
    check_cuda(cudaMalloc(&b.diff, 2 * sizeof(unsigned)), "malloc diff");
    fill_kernel<<<1024, 256>>>(b.x, c.x_elems(), type.cudnn, 1);
    fill_kernel<<<1024, 256>>>(b.w, c.w_elems(), type.cudnn, 2);
    fill_kernel<<<1024, 256>>>(b.dy, c.y_elems(), type.cudnn, 3);
    check_cuda(cudaDeviceSynchronize(), "fill");
    for (Pass p : passes) {
      // The first layer's input gradient is never wanted (frugal computes none for the images).
      if (network && p == Pass::dgrad && c.c == 3) continue;
      std::printf("%s %s (x%lld):\n", pass_name(p), c.str().c_str(),
                  static_cast<long long>(c.count));
      bool have_ref = false;
      Best legacy, graph;
      run_legacy(h, c, p, type, b, have_ref, legacy);
      run_graph(h, c, p, type, b, have_ref, graph, max_heuristics);
      std::printf("  best: legacy %.3f ms (%s), graph %.3f ms (%s)\n", legacy.ms,
                  legacy.what.c_str(), graph.ms, graph.what.c_str());
      if (legacy.ms > 0 && graph.ms > 0) {
        legacy_total += c.count * legacy.ms;
        graph_total += c.count * std::min(graph.ms, legacy.ms);
      }
    }
    for (void* p : {b.x, b.w, b.dy, b.out, b.ref, b.workspace, static_cast<void*>(b.diff)})
      cudaFree(p);
  }
  std::printf(
      "total over the shapes, each times its count: legacy best %.3f ms, best of both "
      "APIs %.3f ms\n",
      legacy_total, graph_total);
  cudnnDestroy(h);
  return 0;
}
