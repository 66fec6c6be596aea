// Note [Graph API candidates] (cudnn_graph.h). Every descriptor call is checked; a graph cuDNN
// will not describe (a dtype or layout it lacks) yields no plans rather than an error, since the
// legacy API's candidates stand beside these.
#include "kernels/cuda/cudnn_graph.h"

#include <algorithm>
#include <utility>

#include "kernels/cuda/check.h"

namespace frugal::kernels::cuda {
namespace {

constexpr int64_t kX = 'x', kW = 'w', kY = 'y';  // the tensors' unique ids in the variant pack

// Owns the descriptors made while building one plan until the plan takes them (or they are
// dropped with it on failure).
class Builder {
 public:
  ~Builder() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      CUDNN_CHECK_NOTHROW(cudnnBackendDestroyDescriptor(*it));
    }
  }
  // A new descriptor of `type`, or nullptr.
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!ok(cudnnBackendCreateDescriptor(type, &d))) return nullptr;
    made_.push_back(d);
    return d;
  }
  template <typename T>
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const T* values) {
    if (d != nullptr) ok(cudnnBackendSetAttribute(d, name, type, count, values));
  }
  void finalize(cudnnBackendDescriptor_t d) {
    if (d != nullptr) ok(cudnnBackendFinalize(d));
  }
  bool good() const { return good_; }
  std::vector<cudnnBackendDescriptor_t> release() { return std::exchange(made_, {}); }

 private:
  bool ok(cudnnStatus_t st) {
    good_ = good_ && st == CUDNN_STATUS_SUCCESS;
    return st == CUDNN_STATUS_SUCCESS;
  }
  std::vector<cudnnBackendDescriptor_t> made_;
  bool good_ = true;
};

cudnnDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

// NHWC data (and OHWI filters) as the graph API describes them: dimensions in N, C, H, W order,
// strides of the NHWC layout.
cudnnBackendDescriptor_t tensor(Builder& b, int64_t uid, cudnnDataType_t type, int64_t n, int64_t c,
                                int64_t h, int64_t w) {
  cudnnBackendDescriptor_t d = b.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w};
  const int64_t strides[4] = {h * w * c, 1, w * c, c};
  const int64_t alignment = kGraphAlignment;
  b.set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  b.set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  b.set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  b.set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  b.set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  b.finalize(d);
  return d;
}

// The operation descriptor's type and attribute names, by pass: x, w and y hold dx in the input
// gradient and dw in the weight gradient.
struct OpAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OpAttributes op_attributes(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvPass::backward_input:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvPass::backward_weight:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

// The operation graph of one pass, or nullptr; its descriptors stay in `b`.
cudnnBackendDescriptor_t operation_graph(Builder& b, cudnnHandle_t h, ConvPass pass, DType dtype,
                                         const Conv2dShape& s) {
  const cudnnDataType_t t = data_type(dtype);
  cudnnBackendDescriptor_t x = tensor(b, kX, t, s.n, s.c, s.h, s.w);
  cudnnBackendDescriptor_t w = tensor(b, kW, t, s.k, s.cin_per_group(), s.kh, s.kw);
  cudnnBackendDescriptor_t y = tensor(b, kY, t, s.n, s.k, s.oh(), s.ow());

  cudnnBackendDescriptor_t conv = b.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;  // Note [Graph API candidates]: f32 sums
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2;
  const int64_t dilations[2] = {s.dil_h, s.dil_w}, strides[2] = {s.stride_h, s.stride_w},
                pads[2] = {s.pad_h, s.pad_w};
  b.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilations);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
  b.finalize(conv);

  const OpAttributes a = op_attributes(pass);
  const float alpha = 1.0f, beta = 0.0f;
  const auto D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  cudnnBackendDescriptor_t op = b.make(a.type);
  b.set(op, a.x, D, 1, &x);
  b.set(op, a.w, D, 1, &w);
  b.set(op, a.y, D, 1, &y);
  b.set(op, a.conv, D, 1, &conv);
  b.set(op, a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  b.set(op, a.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  b.finalize(op);

  cudnnBackendDescriptor_t graph = b.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, D, 1, &op);
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  b.finalize(graph);
  return b.good() ? graph : nullptr;
}

// The engine configurations heuristics `mode` lists for `graph`, each made in `b`.
std::vector<cudnnBackendDescriptor_t> engine_configs(Builder& b, cudnnBackendDescriptor_t graph,
                                                     cudnnBackendHeurMode_t mode) {
  Builder local;  // the heuristics descriptor itself is not kept
  cudnnBackendDescriptor_t heur = local.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  local.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  local.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  local.finalize(heur);
  int64_t count = 0;
  if (!local.good() ||
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               0, &count, nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0) {
    return {};
  }
  std::vector<cudnnBackendDescriptor_t> cfgs;
  for (int64_t i = 0; i < count; ++i) {
    cudnnBackendDescriptor_t c = b.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (c == nullptr) return {};
    cfgs.push_back(c);
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               count, &got, cfgs.data()) != CUDNN_STATUS_SUCCESS) {
    return {};
  }
  cfgs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return cfgs;
}

// The configuration's engine: its global index, and whether its numerical notes rule it out
// (Note [Graph API candidates]).
struct EngineInfo {
  int64_t index = -1;
  bool excluded = true;
};

EngineInfo engine_info(cudnnBackendDescriptor_t cfg, DType dtype, bool tf32) {
  Builder b;
  cudnnBackendDescriptor_t engine = b.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  EngineInfo info;
  if (engine == nullptr ||
      cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &n, &engine) != CUDNN_STATUS_SUCCESS) {
    return info;
  }
  cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                           &info.index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t got = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got,
                               notes) != CUDNN_STATUS_SUCCESS) {
    return info;
  }
  info.excluded = false;
  for (int64_t i = 0; i < std::min<int64_t>(got, CUDNN_NUMERICAL_NOTE_TYPE_COUNT); ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:          // inputs rounded below their type
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:  // sums in 16 bits
        info.excluded = true;
        break;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:  // for f32 data: TF32
        info.excluded |= dtype == DType::f32 && !tf32;
        break;
      default:
        break;
    }
  }
  return info;
}

}  // namespace

GraphPlan::~GraphPlan() {
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) {
    CUDNN_CHECK_NOTHROW(cudnnBackendDestroyDescriptor(*it));
  }
}

cudnnStatus_t GraphPlan::execute(cudnnHandle_t h, const void* x, const void* w, const void* y,
                                 void* workspace) const {
  // The variant pack is a handful of host-side fields: made per call, as cudnn-frontend does.
  cudnnBackendDescriptor_t pack = nullptr;
  cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const int64_t uids[3] = {kX, kW, kY};
  void* pointers[3] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  st =
      cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  if (st == CUDNN_STATUS_SUCCESS) {
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                  3, pointers);
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                  &workspace);
  }
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(pack);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(h, plan_, pack);
  CUDNN_CHECK_NOTHROW(cudnnBackendDestroyDescriptor(pack));
  return st;
}

std::vector<std::shared_ptr<const GraphPlan>> graph_plans(cudnnHandle_t h, ConvPass pass,
                                                          DType dtype, const Conv2dShape& s,
                                                          bool tf32, size_t limit, size_t max) {
  std::vector<std::shared_ptr<const GraphPlan>> plans;
  if (max == 0) return plans;
  auto common = std::make_shared<Builder>();  // the graph and configurations every plan refers to
  cudnnBackendDescriptor_t graph = operation_graph(*common, h, pass, dtype, s);
  if (graph == nullptr) return plans;
  std::vector<cudnnBackendDescriptor_t> cfgs = engine_configs(*common, graph, CUDNN_HEUR_MODE_A);
  const size_t tuned = cfgs.size();  // mode A's, with knobs chosen; the fallback list's follow
  for (cudnnBackendDescriptor_t c : engine_configs(*common, graph, CUDNN_HEUR_MODE_FALLBACK)) {
    cfgs.push_back(c);
  }
  std::vector<int64_t> seen;  // engines planned so far
  for (size_t i = 0; i < cfgs.size() && plans.size() < max; ++i) {
    const EngineInfo info = engine_info(cfgs[i], dtype, tf32);
    if (info.excluded) continue;
    // A fallback configuration (default knobs) of an engine mode A listed adds nothing but
    // benchmarking time.
    const bool repeat = std::find(seen.begin(), seen.end(), info.index) != seen.end();
    if (i >= tuned && repeat) continue;
    Builder b;
    cudnnBackendDescriptor_t plan = b.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    b.set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    b.set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &cfgs[i]);
    b.finalize(plan);
    int64_t workspace = 0, n = 0;
    if (!b.good() ||
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                 1, &n, &workspace) != CUDNN_STATUS_SUCCESS ||
        workspace < 0 || static_cast<size_t>(workspace) > limit) {
      continue;
    }
    seen.push_back(info.index);
    std::shared_ptr<GraphPlan> p(new GraphPlan());
    p->common_ = common;
    p->owned_ = b.release();
    p->plan_ = plan;
    p->engine_ = info.index;
    p->workspace_ = static_cast<size_t>(workspace);
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace frugal::kernels::cuda
