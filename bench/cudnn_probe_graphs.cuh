// The cuDNN graphs bench/cudnn_fusion_probe.cu asks for: a backend-API descriptor builder that
// keeps cuDNN's reason for the first failure, and the forward graph of a 1x1 convolution with an
// optional prologue on its input (scale, shift, ReLU or ReLU6) and epilogue on its output
// (GenStats, or one sum), with the engines heuristics list for it.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mobilenet_v2_pointwise.h"

namespace cudnn_probe {

inline std::string cudnn_reason(cudnnStatus_t st) {
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof last);
  std::string why = cudnnGetErrorString(st);
  if (last[0] != '\0') why += std::string(": ") + last;
  std::replace(why.begin(), why.end(), '\n', ' ');
  return why;
}

// Makes descriptors, keeps the first failure (what failed and cuDNN's reason) and destroys what
// it made, last first.
class Builder {
 public:
  Builder() = default;
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;
  ~Builder() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* what) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!ok(cudnnBackendCreateDescriptor(type, &d), what)) return nullptr;
    made_.push_back(d);
    return d;
  }
  template <typename T>
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const T* values, const char* what) {
    if (d != nullptr) ok(cudnnBackendSetAttribute(d, name, type, count, values), what);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (d != nullptr) ok(cudnnBackendFinalize(d), what);
  }
  bool good() const { return failure_.empty(); }
  const std::string& failure() const { return failure_; }

 private:
  bool ok(cudnnStatus_t st, const char* what) {
    if (st != CUDNN_STATUS_SUCCESS && failure_.empty()) {
      failure_ = std::string(what) + " (" + cudnn_reason(st) + ")";
    }
    return st == CUDNN_STATUS_SUCCESS;
  }
  std::vector<cudnnBackendDescriptor_t> made_;
  std::string failure_;
};

constexpr auto kDesc = CUDNN_TYPE_BACKEND_DESCRIPTOR;

// The tensors' unique ids in the variant pack; the virtual ones are never bound.
enum Uid : int64_t { kX = 1, kW, kScale, kShift, kY, kSum, kSqSum, kScaled, kShifted, kActive };

// A 4-d tensor in NHWC strides with dimensions in N, C, H, W order.
inline cudnnBackendDescriptor_t tensor(Builder& b, int64_t uid, cudnnDataType_t type, int64_t n,
                                       int64_t c, int64_t h, int64_t w, bool is_virtual = false) {
  cudnnBackendDescriptor_t d = b.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
  const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c};
  const int64_t alignment = 16;
  b.set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
  b.set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
  b.set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
  b.set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  b.set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
  b.set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
  b.finalize(d, "tensor finalize");
  return d;
}

// y = op(x, other) (other null for unary modes); ReLU clips at [0, upper] when upper > 0.
inline cudnnBackendDescriptor_t pointwise(Builder& b, cudnnPointwiseMode_t mode,
                                          cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t other,
                                          cudnnBackendDescriptor_t y, double upper = 0.0) {
  cudnnBackendDescriptor_t pw = b.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
  b.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  b.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision, "pointwise prec");
  if (mode == CUDNN_POINTWISE_RELU_FWD) {
    const double lower = 0.0;
    b.set(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lower, "relu lower");
    if (upper > 0.0) {
      b.set(pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &upper, "relu upper");
    }
  }
  b.finalize(pw, "pointwise finalize");
  cudnnBackendDescriptor_t op =
      b.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
  b.set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, kDesc, 1, &pw, "pointwise op desc");
  b.set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, kDesc, 1, &x, "pointwise op x");
  if (other != nullptr) {
    b.set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, kDesc, 1, &other, "pointwise op b");
  }
  b.set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, kDesc, 1, &y, "pointwise op y");
  b.finalize(op, "pointwise operation finalize");
  return op;
}

// ---- the graphs -------------------------------------------------------------------------------

enum class Prologue { none, affine, relu, relu6 };
enum class Epilogue { none, stats, sum };

struct Variant {
  const char* name;
  Prologue prologue;
  Epilogue epilogue;
  cudnnDataType_t scale_type;  // of scale and shift: f16 for the ConvBNfprop pattern
};

using Shape = probe::PointwiseShape;
constexpr int kBatch = probe::kPointwiseBatch;

// The operation graph of variant v at shape s, built in b (nullptr with b.failure() on failure).
inline cudnnBackendDescriptor_t operation_graph(Builder& b, cudnnHandle_t h, const Variant& v,
                                                const Shape& s) {
  const auto half = CUDNN_DATA_HALF, f32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t x = tensor(b, kX, half, kBatch, s.k, s.hw, s.hw);
  cudnnBackendDescriptor_t w = tensor(b, kW, half, s.n, s.k, 1, 1);
  cudnnBackendDescriptor_t y = tensor(b, kY, half, kBatch, s.n, s.hw, s.hw);
  std::vector<cudnnBackendDescriptor_t> ops;

  cudnnBackendDescriptor_t input = x;  // what the convolution reads
  if (v.prologue != Prologue::none) {
    cudnnBackendDescriptor_t scale = tensor(b, kScale, v.scale_type, 1, s.k, 1, 1);
    cudnnBackendDescriptor_t shift = tensor(b, kShift, v.scale_type, 1, s.k, 1, 1);
    cudnnBackendDescriptor_t scaled = tensor(b, kScaled, f32, kBatch, s.k, s.hw, s.hw, true);
    cudnnBackendDescriptor_t shifted = tensor(b, kShifted, f32, kBatch, s.k, s.hw, s.hw, true);
    ops.push_back(pointwise(b, CUDNN_POINTWISE_MUL, x, scale, scaled));
    ops.push_back(pointwise(b, CUDNN_POINTWISE_ADD, scaled, shift, shifted));
    input = shifted;
    if (v.prologue != Prologue::affine) {
      cudnnBackendDescriptor_t active = tensor(b, kActive, f32, kBatch, s.k, s.hw, s.hw, true);
      const double upper = v.prologue == Prologue::relu6 ? 6.0 : 0.0;
      ops.push_back(pointwise(b, CUDNN_POINTWISE_RELU_FWD, shifted, nullptr, active, upper));
      input = active;
    }
  }

  cudnnBackendDescriptor_t conv = b.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution");
  const cudnnDataType_t compute = f32;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, ones[2] = {1, 1}, zeros[2] = {0, 0};
  b.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "conv type");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "conv mode");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "conv dims");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones, "conv dilations");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones, "conv strides");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, zeros, "conv pads");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, zeros, "conv pads");
  b.finalize(conv, "convolution finalize");
  const float alpha = 1.0f, beta = 0.0f;
  cudnnBackendDescriptor_t fprop =
      b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "fprop");
  b.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, kDesc, 1, &input, "fprop x");
  b.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, kDesc, 1, &w, "fprop w");
  b.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, kDesc, 1, &y, "fprop y");
  b.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, kDesc, 1, &conv, "fprop conv");
  b.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha,
        "alpha");
  b.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "beta");
  b.finalize(fprop, "fprop finalize");
  ops.push_back(fprop);

  if (v.epilogue != Epilogue::none) {
    cudnnBackendDescriptor_t sum = tensor(b, kSum, f32, 1, s.n, 1, 1);
    if (v.epilogue == Epilogue::stats) {
      cudnnBackendDescriptor_t sq = tensor(b, kSqSum, f32, 1, s.n, 1, 1);
      cudnnBackendDescriptor_t op =
          b.make(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, "genstats");
      const cudnnGenStatsMode_t gmode = CUDNN_GENSTATS_SUM_SQSUM;
      b.set(op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gmode, "gs mode");
      b.set(op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute,
            "gs prec");
      b.set(op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, kDesc, 1, &y, "genstats x");
      b.set(op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, kDesc, 1, &sum, "genstats sum");
      b.set(op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, kDesc, 1, &sq, "genstats sqsum");
      b.finalize(op, "genstats finalize");
      ops.push_back(op);
    } else {
      cudnnBackendDescriptor_t red = b.make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
      const cudnnReduceTensorOp_t add = CUDNN_REDUCE_TENSOR_ADD;
      b.set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &add,
            "red op");
      b.set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "red type");
      b.finalize(red, "reduction finalize");
      cudnnBackendDescriptor_t op =
          b.make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
      b.set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, kDesc, 1, &y, "reduction x");
      b.set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, kDesc, 1, &sum, "reduction y");
      b.set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, kDesc, 1, &red, "reduction desc");
      b.finalize(op, "reduction operation finalize");
      ops.push_back(op);
    }
  }

  cudnnBackendDescriptor_t graph = b.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "graph");
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, kDesc, static_cast<int64_t>(ops.size()), ops.data(),
        "graph ops");
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
  b.finalize(graph, "graph finalize");
  return b.good() ? graph : nullptr;
}

// The engine configurations heuristics `mode` lists for `graph`, made in b.
inline std::vector<cudnnBackendDescriptor_t> engine_configs(Builder& b,
                                                            cudnnBackendDescriptor_t graph,
                                                            cudnnBackendHeurMode_t mode) {
  Builder local;
  cudnnBackendDescriptor_t heur = local.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
  local.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, kDesc, 1, &graph, "heur graph");
  local.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heur mode");
  local.finalize(heur, "heuristics finalize");
  int64_t count = 0;
  if (!local.good() ||
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, kDesc, 0, &count, nullptr) !=
          CUDNN_STATUS_SUCCESS ||
      count <= 0) {
    return {};
  }
  std::vector<cudnnBackendDescriptor_t> cfgs;
  for (int64_t i = 0; i < count; ++i)
    cfgs.push_back(b.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "cfg"));
  int64_t got = 0;
  if (!b.good() || cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, kDesc, count, &got,
                                            cfgs.data()) != CUDNN_STATUS_SUCCESS) {
    return {};
  }
  cfgs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return cfgs;
}

// The configuration's engine: its global index and whether it compiles at run time.
inline std::pair<int64_t, bool> engine_of(cudnnBackendDescriptor_t cfg) {
  Builder b;
  cudnnBackendDescriptor_t engine = b.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  int64_t n = 0, index = -1;
  if (engine == nullptr || cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, kDesc, 1, &n,
                                                    &engine) != CUDNN_STATUS_SUCCESS) {
    return {-1, false};
  }
  cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
  cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t got = 0;
  bool runtime = false;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &got,
                               notes) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < std::min<int64_t>(got, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT); ++i) {
      runtime |= notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    }
  }
  return {index, runtime};
}

}  // namespace cudnn_probe
