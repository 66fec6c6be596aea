// Define-by-run autograd: each differentiable op records a Node that knows its inputs' edges and
// how to map output gradients to input gradients. The engine walks nodes in reverse topological
// order and, the moment a node has run, drops what it saved and the gradient buffer it consumed
// (Note [Eager freeing]), so peak memory during backward shrinks as it goes.
//
// Writing a differentiable op (this is also the extension path for users):
//
//   Tensor my_square(const Tensor& x) {
//     Tensor y = mul(x.detach(), x.detach());                 // forward without history
//     return autograd::record("my_square", {x}, y, /*saved=*/{x},
//         [](const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
//           return std::vector<Tensor>{mul(mul(g[0], saved[0]), 2.0)};  // one per input
//         });
//   }
//
// The saved list is what the node keeps (Note [Saved tensors]); the engine can list and size it
// and frees it right after the node ran. A closure that captures tensors itself (the older
// `record(name, inputs, outputs, fn)` with `autograd::save`) still works, but what it keeps is
// invisible to the memory tools and never replaced by a recipe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/scoped_value.h"
#include "core/saved_tensor.h"
#include "core/tensor.h"

namespace frugal::autograd {

struct Edge {
  std::shared_ptr<Node> node;  // null when that input needs no gradient
  uint32_t input_nr = 0;
  // The input's device and element count: the engine refuses a gradient of another device or
  // size before a backward reads it. Its dtype may differ (Note [Gradient dtypes]).
  Device device;
  int64_t numel = 0;
};

class Node {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // grads: one per output of this node (undefined when none flowed). Returns one gradient per
  // next edge (undefined where not needed).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // Drops saved tensors; called by the engine right after apply unless the graph is retained.
  virtual void release_saved() {}
  // What the node keeps for backward, when it declares it (Note [Saved tensors]).
  virtual void collect_saved(std::vector<const SavedTensor*>& out) const { (void)out; }
  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].node; }

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr = 0;  // creation order; later nodes run first among ready ones
  // The module path the node was recorded under ("features.3"; null at the top level) and the
  // bytes of its outputs: what per-module listings of saved memory group and count by.
  std::shared_ptr<const std::string> module;
  size_t output_bytes = 0;
};

// The dotted path of the modules whose forward is running on this thread, kept with the other
// allocation tags (Note [Allocation events]). nn::Module's call operator opens one scope per
// module; record() stamps each node with the current path.
using memory::ModuleScope;

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads)>;
// grads: one per output; saved: the node's saved list, unpacked (recipes recomputed). A backward
// may reset an entry of `saved` once it is done with it, so that a recomputed tensor is freed
// before the rest of the backward allocates (conv2d drops its input after the weight gradient).
using SavedBackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads,
                                                          std::vector<Tensor>& saved)>;

// A node whose backward is a closure over its declared saved tensors (and small constants).
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, std::vector<SavedTensor> saved, SavedBackwardFn fn)
      : name_(std::move(name)), saved_(std::move(saved)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  void release_saved() override {
    fn_ = nullptr;
    saved_.clear();
    recipes_.clear();
  }
  // Keeps the recipes of this node's outputs alive while backward may still save them.
  void own_recipe(std::shared_ptr<const Recipe> r) { recipes_.push_back(std::move(r)); }
  void collect_saved(std::vector<const SavedTensor*>& out) const override {
    for (const SavedTensor& s : saved_) out.push_back(&s);
  }

 private:
  std::string name_;
  std::vector<SavedTensor> saved_;
  std::vector<std::shared_ptr<const Recipe>> recipes_;
  SavedBackwardFn fn_;
};

// Leaf gradient sink: adds the incoming gradient into the leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// Grad mode (thread-local). Under NoGradGuard no op records history; GradModeGuard sets it
// either way (activation checkpointing re-enables it inside backward).
bool grad_enabled();
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);

 private:
  ScopedValue<bool> set_;  // Note [Scoped thread-local settings]
};
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

// Note [Checkpointing]: true while a checkpointed segment runs its forward again inside
// backward. State that a step must change once (BatchNorm's running statistics and
// num_batches_tracked) is left alone then; everything else runs as in the first forward.
bool recomputing();
class RecomputingGuard {
 public:
  RecomputingGuard();

 private:
  ScopedValue<bool> set_;  // Note [Scoped thread-local settings]
};

// True when grad mode is on and any input requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);
// The edge a gradient for `t` flows into (its grad_fn, or its leaf accumulator).
Edge edge_of(const Tensor& t);
// True when this handle is the only reference to t's bytes (no other tensor, view or user handle
// shares them): a backward may then write its result over an incoming gradient it no longer needs.
inline bool sole_owner(const Tensor& t) {
  return t.defined() && t.impl_ptr().use_count() == 1 && t.impl().storage.use_count() == 1;
}
// A fresh creation-order number, for nodes built by hand rather than through record().
uint64_t next_sequence_nr();
// A tensor captured by an old-style closure: same data, no history (so the graph has no cycles).
// Prefer the saved list of record(), which the engine can see.
inline Tensor save(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

// Attaches history to `outputs` (all produced by one op from `inputs`) when needed and returns
// the outputs. `fn` receives one gradient per output and returns one per input.
std::vector<Tensor> record(const std::string& name, const std::vector<Tensor>& inputs,
                           std::vector<Tensor> outputs, BackwardFn fn);
Tensor record(const std::string& name, const std::vector<Tensor>& inputs, Tensor output,
              BackwardFn fn);
// The same with the saved tensors declared (Note [Saved tensors]).
std::vector<Tensor> record(const std::string& name, const std::vector<Tensor>& inputs,
                           std::vector<Tensor> outputs, std::vector<SavedTensor> saved,
                           SavedBackwardFn fn);
Tensor record(const std::string& name, const std::vector<Tensor>& inputs, Tensor output,
              std::vector<SavedTensor> saved, SavedBackwardFn fn);

// Everything the graph behind `roots` keeps for backward, each storage counted once (the
// roots' own bytes are not included unless a node saved them).
size_t saved_bytes(const std::vector<Tensor>& roots);

// The same per module: each storage goes to the earliest node that saved it, grouped by the
// first `depth` components of that node's module path (depth <= 0: the whole path). Also counts
// the bytes of every conv2d output per module, the one-tensor-per-layer bound.
struct ModuleSaved {
  std::string module;  // "" for nodes outside any module
  size_t saved_bytes = 0;
  size_t conv_output_bytes = 0;
};
std::vector<ModuleSaved> saved_bytes_by_module(const std::vector<Tensor>& roots, int depth);

// Runs backward from roots with the given gradients (see Tensor::backward).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph);

}  // namespace frugal::autograd
