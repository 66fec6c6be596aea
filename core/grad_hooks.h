// Hooks into the autograd engine for code that acts on gradients while backward runs: data
// parallelism launches a bucket's all-reduce the moment its last gradient is accumulated, and
// finishes the rest when backward ends (dist/data_parallel.h).
//
// Note [Gradient hooks]
// - A post-accumulate hook runs right after backward has added a gradient into its leaf's .grad
//   (PyTorch's register_post_accumulate_grad_hook), on the thread running backward, with the
//   leaf. The engine adds each leaf's incoming gradients up before accumulating, so a hook runs
//   once per leaf and backward (once per checkpointed segment's inner backward, where a leaf is
//   reached through one).
// - A queued callback runs once when the outermost backward on this thread finishes, after every
//   node ran (PyTorch's Variable._execution_engine.queue_callback). It is dropped when backward
//   throws.
//
//   autograd::HookHandle h = autograd::add_post_accumulate_grad_hook(w, [](const Tensor& leaf) {
//     ...leaf.grad()...
//   });  // removed when h is destroyed
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace frugal::autograd {

using PostAccumulateHook = std::function<void(const Tensor& leaf)>;

// Removes its hook when destroyed (or on reset()); movable.
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(uint64_t id) : id_(id) {}
  HookHandle(HookHandle&& o) noexcept : id_(o.id_) { o.id_ = 0; }
  HookHandle& operator=(HookHandle&& o) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  ~HookHandle() { reset(); }
  void reset();

 private:
  uint64_t id_ = 0;
};

// `leaf` must be a leaf that requires grad. The hook must not run backward itself.
[[nodiscard]] HookHandle add_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook);

// True while backward runs on this thread.
bool in_backward();
// Runs `fn` when the outermost backward running on this thread finishes; an error outside one.
void queue_callback(std::function<void()> fn);

}  // namespace frugal::autograd
