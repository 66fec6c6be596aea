// Activation checkpointing (Note [Checkpointing] in nn/checkpoint.h).
#include "nn/checkpoint.h"

#include <algorithm>

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

}  // namespace

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Tensor>& params) {
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : params) {
    if (p.defined() && p.requires_grad()) inputs.push_back(p);
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
                            {
                              autograd::GradModeGuard grad(true);
                              autograd::RecomputingGuard recomputing;
                              autocast::RestoreGuard autocast(amp);
                              GeneratorRewind rewind(gen_offset);
                              y_again = fn(x_leaf);
                            }
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
