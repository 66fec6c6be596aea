// Activation checkpointing (Note [Checkpointing] in nn/checkpoint.h).
#include "nn/checkpoint.h"

#include <algorithm>
#include <unordered_set>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/factory.h"

namespace frugal::nn {
namespace {

// Sets the default generator back to where the first forward started, and afterwards forward
// again to where it was.
class GeneratorRewind {
 public:
  explicit GeneratorRewind(uint64_t offset) : gen_(default_generator()), now_(gen_.offset()) {
    gen_.set_offset(offset);
  }
  ~GeneratorRewind() { gen_.set_offset(now_); }
  GeneratorRewind(const GeneratorRewind&) = delete;
  GeneratorRewind& operator=(const GeneratorRewind&) = delete;

 private:
  Generator& gen_;
  uint64_t now_;
};

// Throws when the replayed segment's graph (from y, whose nodes were recorded from sequence
// number `first` on) reaches a node recorded before the replay other than a leaf's: a tensor
// with history that fn read without it being the input (Note [Checkpointing]). Runs before the
// replay's backward, so nothing has been accumulated yet.
void check_replay_is_closed(const Tensor& y, uint64_t first) {
  std::vector<autograd::Node*> todo;
  std::unordered_set<autograd::Node*> seen;
  if (y.grad_fn()) todo.push_back(y.grad_fn().get());
  while (!todo.empty()) {
    autograd::Node* n = todo.back();
    todo.pop_back();
    // A leaf's node, and the cast of a parameter that autocast cached before the replay (a
    // backward inside the autocast region reuses the forward's copies), lead to leaves alone.
    if (!seen.insert(n).second || dynamic_cast<autograd::AccumulateGrad*>(n) != nullptr ||
        autocast::is_parameter_cast(*n)) {
      continue;
    }
    FRUGAL_CHECK(n->sequence_nr >= first, "checkpoint: the segment reads a tensor made by '",
                 n->name(), "' before it, which needs a gradient and is neither the segment's ",
                 "input nor a leaf; the replay cannot hand that gradient back. Pass it as the ",
                 "input, detach it, or leave it out of the checkpointed segment");
    for (const autograd::Edge& e : n->next_edges) {
      if (e.node) todo.push_back(e.node.get());
    }
  }
}

}  // namespace

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Tensor>& params) {
  std::vector<Tensor> inputs{x};
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!p.defined() || !p.requires_grad()) continue;
    FRUGAL_CHECK(p.is_leaf(), "checkpoint: parameter ", i, " (", describe(p),
                 ") has autograd history (made by '", p.grad_fn()->name(),
                 "'); the segment's parameters must be leaves (Note [Checkpointing])");
    inputs.push_back(p);
  }
  if (!autograd::any_requires_grad(inputs)) return fn(x);
  const autocast::Snapshot amp = autocast::snapshot();
  const uint64_t gen_offset = default_generator().offset();
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = fn(x);
  }
  y = y.detach();
  const bool x_needs_grad = x.requires_grad();
  const size_t n_inputs = inputs.size();
  return autograd::record("checkpoint", inputs, y, {x},
                          [fn, amp, gen_offset, x_needs_grad, n_inputs](
                              const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
                            Tensor x_leaf = saved[0].detach();
                            if (x_needs_grad) x_leaf.requires_grad_(true);
                            Tensor y_again;
                            const uint64_t first = autograd::next_sequence_nr();
                            {
                              autograd::GradModeGuard grad(true);
                              autograd::RecomputingGuard recomputing;
                              autocast::RestoreGuard autocast(amp);
                              GeneratorRewind rewind(gen_offset);
                              y_again = fn(x_leaf);
                            }
                            check_replay_is_closed(y_again, first);
                            std::vector<Tensor> grads(n_inputs);
                            // Parameters accumulate their gradients in this inner backward, as they
                            // would have in the outer one; only the input's gradient is handed back
                            // to the outer engine.
                            if (y_again.requires_grad())
                              autograd::run_backward({y_again}, {g[0]}, false);
                            if (x_needs_grad) grads[0] = x_leaf.grad();
                            return grads;
                          });
}

Checkpoint::Checkpoint(std::shared_ptr<Module> inner) : inner_(std::move(inner)) {
  FRUGAL_CHECK(inner_ != nullptr, "Checkpoint: null module");
  register_module("", inner_);
}

Tensor Checkpoint::forward(const Tensor& x) {
  if (!is_training()) return (*inner_)(x);
  // The recomputation holds the inner module itself, not this wrapper: backward may run after
  // the wrapper is gone (a temporary Checkpoint, a model freed before its loss's backward).
  return checkpoint([inner = inner_](const Tensor& in) { return (*inner)(in); }, x,
                    inner_->parameters());
}

Tensor checkpoint_sequential(const Sequential& seq, int64_t segments, const Tensor& x) {
  const int64_t n = static_cast<int64_t>(seq.size());
  FRUGAL_CHECK(segments > 0, "checkpoint_sequential: segments must be positive, got ", segments);
  segments = std::min(segments, std::max<int64_t>(n, 1));
  Tensor h = x;
  for (int64_t s = 0; s < segments; ++s) {
    const int64_t begin = n * s / segments, end = n * (s + 1) / segments;
    auto run = [&seq, begin, end](const Tensor& in) { return seq.forward_range(begin, end, in); };
    if (s + 1 == segments) {
      h = run(h);
    } else {
      std::vector<Tensor> params;
      for (int64_t i = begin; i < end; ++i) {
        for (const Tensor& p : seq[static_cast<size_t>(i)]->parameters()) params.push_back(p);
      }
      h = checkpoint(run, h, params);
    }
  }
  return h;
}

}  // namespace frugal::nn
