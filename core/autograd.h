// Define-by-run autograd: each differentiable op records a Node that knows its inputs' edges and
// how to map output gradients to input gradients. The engine walks nodes in reverse topological
// order and, the moment a node has run, drops what it saved and the gradient buffer it consumed
// (Note [Eager freeing]), so peak memory during backward shrinks as it goes.
//
// Writing a differentiable op (this is also the extension path for users):
//
//   Tensor my_square(const Tensor& x) {
//     Tensor y = mul(x.detach(), x.detach());                 // forward without history
//     return autograd::record("my_square", {x}, y,
//         [x = autograd::save(x)](const std::vector<Tensor>& g) -> std::vector<Tensor> {
//           return {mul(mul(g[0], x), 2.0)};                  // one gradient per input
//         });
//   }
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace frugal::autograd {

struct Edge {
  std::shared_ptr<Node> node;  // null when that input needs no gradient
  uint32_t input_nr = 0;
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
  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].node; }

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr = 0;  // creation order; later nodes run first among ready ones
};

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads)>;

// A node whose backward is a closure; its captures are the saved tensors.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  void release_saved() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
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

// Grad mode (thread-local). Under NoGradGuard no op records history.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and any input requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);
// The edge a gradient for `t` flows into (its grad_fn, or its leaf accumulator).
Edge edge_of(const Tensor& t);
// A fresh creation-order number, for nodes built by hand rather than through record().
uint64_t next_sequence_nr();
// A tensor saved for backward: same data, no history (so the graph has no cycles).
inline Tensor save(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

// Attaches history to `outputs` (all produced by one op from `inputs`) when needed and returns
// the outputs. `fn` receives one gradient per output and returns one per input.
std::vector<Tensor> record(const std::string& name, const std::vector<Tensor>& inputs,
                           std::vector<Tensor> outputs, BackwardFn fn);
Tensor record(const std::string& name, const std::vector<Tensor>& inputs, Tensor output,
              BackwardFn fn);

// Runs backward from roots with the given gradients (see Tensor::backward).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph);

}  // namespace frugal::autograd
