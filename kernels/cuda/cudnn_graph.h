// Convolution passes through cuDNN's graph API: the execution plans of the engine
// configurations its heuristics list, which kernels/cuda/conv.cu benchmarks beside the legacy
// API's algorithms.
//
// Note [Graph API candidates]: cuDNN's legacy API (cudnnGet*Algorithm_v7) names about eight
// algorithms a pass and picks the kernel behind each itself. For 16-bit ResNet-18 on the H200
// that pick was up to twice as slow in bf16 as in f16 for the same shape (the 7x7 stem's forward
// 0.90 ms against 0.43, its weight gradient 0.58 against 0.30; bench/RESULTS.md, session 27),
// with no faster candidate at any workspace. The graph API lists engine configurations one by
// one (heuristics mode A, then the fallback list), each a kernel with its tuning knobs: the
// candidates PyTorch's cudnn.benchmark draws on. A plan is built once per configuration (shape,
// dtype, pass) and kept in conv.cu's algorithm cache beside the legacy candidates; the benchmark
// picks the fastest of both. f32 keeps its numerics: plans that convert inputs down are dropped,
// and tensor-core ones too unless TF32 is allowed. Deterministic mode uses the legacy API alone
// (its determinism flags are what Note [Deterministic mode] was checked against).
// Measured (session 28): the graph API's Hopper engines won every ResNet-18 pass but the stem's,
// often by 4x in the benchmark (a 56x56x64 3x3 forward 0.069 ms against the legacy 0.281), and the
// replayed step gained 4-5% in both 16-bit types; the bf16 stem has no faster engine in either
// API (0.89 ms forward against f16's 0.29), so bf16 still trails f16 there.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "kernels/conv.h"
#include "kernels/conv_workspace.h"

namespace frugal::kernels::cuda {

// The byte alignment plans are built for: GraphPlan::execute wants x, w and y aligned to it.
constexpr size_t kGraphAlignment = 16;

// One engine configuration of a convolution pass, finalized into an execution plan; owns the
// descriptors the plan refers to.
class GraphPlan {
 public:
  ~GraphPlan();
  GraphPlan(const GraphPlan&) = delete;
  GraphPlan& operator=(const GraphPlan&) = delete;

  int64_t engine() const { return engine_; }  // cuDNN's global engine index, for logs
  size_t workspace() const { return workspace_; }
  // Runs the pass: x, w and y are the pass's tensors, each aligned to kGraphAlignment, the output
  // among them (y forward, x the input gradient, w the weight gradient); `workspace` holds at
  // least workspace() bytes. Returns cuDNN's status, as the legacy calls do.
  cudnnStatus_t execute(cudnnHandle_t h, const void* x, const void* w, const void* y,
                        void* workspace) const;

 private:
  friend std::vector<std::shared_ptr<const GraphPlan>> graph_plans(cudnnHandle_t, ConvPass, DType,
                                                                   const Conv2dShape&, bool, size_t,
                                                                   size_t);
  GraphPlan() = default;
  // The operation graph, its tensors and engine configurations, shared by the plans of one call
  // of graph_plans (a plan refers to them); then the plan's own descriptors, destroyed first.
  std::shared_ptr<void> common_;
  std::vector<cudnnBackendDescriptor_t> owned_;  // destroyed last to first
  cudnnBackendDescriptor_t plan_ = nullptr;
  int64_t engine_ = -1;
  size_t workspace_ = 0;
};

// The plans of pass `pass` of `s` in `dtype` whose workspace fits `limit`, in the order of
// heuristics mode A and then the fallback list, at most `max`; configurations that do not
// finalize are left out, and for f32 those that convert inputs to 16 bits, or use tensor cores
// unless `tf32`. Empty when cuDNN describes no such graph (the legacy API remains).
std::vector<std::shared_ptr<const GraphPlan>> graph_plans(cudnnHandle_t h, ConvPass pass,
                                                          DType dtype, const Conv2dShape& s,
                                                          bool tf32, size_t limit, size_t max);

}  // namespace frugal::kernels::cuda
