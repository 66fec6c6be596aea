// The autograd engine, grad mode and history recording.
//
// Note [Eager freeing]: backward keeps, at any moment, only the gradients still waiting for a
// consumer. A node's input buffer is moved out before it runs and its saved tensors are released
// right after (unless retain_graph), so activations saved by the forward are returned to the
// allocator in reverse order while backward proceeds, as in PyTorch.
#include "core/autograd.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/autocast.h"
#include "core/grad_hooks.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"

namespace frugal::autograd {
namespace {

thread_local bool t_grad_enabled = true;
thread_local bool t_recomputing = false;
std::atomic<uint64_t> g_next_sequence_nr{0};

struct BySequence {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

void accumulate_into(std::vector<Tensor>& buffer, uint32_t slot, Tensor grad) {
  Tensor& dst = buffer[slot];
  dst = dst.defined() ? add(dst, grad) : std::move(grad);
}

// Note [Gradient hooks]: post-accumulate hooks by leaf, kept here rather than in TensorImpl so
// that a tensor carries nothing for them; the engine asks only while any hook exists.
struct LeafHook {
  uint64_t id;
  // Weak: a hook whose handle outlives its tensor must not run for a new tensor that happens to
  // get the dead one's address.
  std::weak_ptr<TensorImpl> leaf;
  std::shared_ptr<PostAccumulateHook> fn;
};
std::mutex g_hooks_mutex;
std::vector<LeafHook> g_hooks;
std::atomic<uint64_t> g_next_hook_id{1};
std::atomic<size_t> g_hook_count{0};

void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  if (g_hook_count.load(std::memory_order_relaxed) == 0) return;
  std::vector<std::shared_ptr<PostAccumulateHook>> fns;
  {
    std::lock_guard<std::mutex> lock(g_hooks_mutex);
    for (const LeafHook& h : g_hooks) {
      // The same owner: no lock() (a count up and down per hook and leaf); a dead leaf's weak
      // pointer keeps its control block, so its address is no other leaf's.
      if (!h.leaf.owner_before(leaf) && !leaf.owner_before(h.leaf)) fns.push_back(h.fn);
    }
  }
  Tensor t(leaf);
  for (const auto& fn : fns) (*fn)(t);  // outside the lock: a hook may add or remove hooks
}

// The callbacks of the outermost backward running on this thread (null outside backward).
thread_local std::vector<std::function<void()>>* t_backward_callbacks = nullptr;

}  // namespace

HookHandle& HookHandle::operator=(HookHandle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    o.id_ = 0;
  }
  return *this;
}

void HookHandle::reset() {
  if (id_ == 0) return;
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  auto it =
      std::find_if(g_hooks.begin(), g_hooks.end(), [&](const LeafHook& h) { return h.id == id_; });
  if (it != g_hooks.end()) {
    g_hooks.erase(it);
    g_hook_count.fetch_sub(1, std::memory_order_relaxed);
  }
  id_ = 0;
}

HookHandle add_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook) {
  FRUGAL_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(),
               "add_post_accumulate_grad_hook: the tensor must be a leaf that requires grad",
               leaf.defined() && !leaf.is_leaf() ? " (it has a grad_fn)" : "");
  FRUGAL_CHECK(hook != nullptr, "add_post_accumulate_grad_hook: empty hook");
  const uint64_t id = g_next_hook_id++;
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  g_hooks.push_back({id, leaf.impl_ptr(), std::make_shared<PostAccumulateHook>(std::move(hook))});
  g_hook_count.fetch_add(1, std::memory_order_relaxed);
  return HookHandle(id);
}

bool in_backward() { return t_backward_callbacks != nullptr; }

void queue_callback(std::function<void()> fn) {
  FRUGAL_CHECK(t_backward_callbacks != nullptr,
               "queue_callback: no backward is running on this thread");
  t_backward_callbacks->push_back(std::move(fn));
}

bool grad_enabled() { return t_grad_enabled; }
GradModeGuard::GradModeGuard(bool enabled) : set_(t_grad_enabled, enabled) {}

bool recomputing() { return t_recomputing; }
RecomputingGuard::RecomputingGuard() : set_(t_recomputing, true) {}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  FRUGAL_CHECK(fn_ != nullptr, "backward: trying to backward through '", name_,
               "' a second time, but its saved tensors were already freed; pass ",
               "retain_graph=true to the first backward");
  std::vector<Tensor> saved;
  saved.reserve(saved_.size());
  for (const SavedTensor& s : saved_) saved.push_back(s.unpack(name_));
  return fn_(grads, saved);
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  // A leaf frozen (requires_grad_(false)) after the forward that used it gets no gradient, as
  // in PyTorch's AccumulateGrad.
  if (!g.defined() || !leaf_->requires_grad) return {};
  FRUGAL_CHECK(g.shape() == leaf_->shape, "AccumulateGrad: gradient of shape ", g.shape(),
               " for a leaf of shape ", leaf_->shape);
  if (g.dtype() != leaf_->dtype) g = cast(g, leaf_->dtype);
  if (leaf_->grad) {
    // In place, as PyTorch's AccumulateGrad: a handle to .grad taken before (a hook's, a user's)
    // sees the sum, and accumulating allocates nothing. out == a is safe in the elementwise
    // kernels (each element is read before it is written, by the thread that writes it).
    Tensor acc(leaf_->grad);
    FRUGAL_CHECK(acc.shape() == g.shape() && acc.dtype() == g.dtype() && acc.device() == g.device(),
                 "AccumulateGrad: .grad ", describe(acc), " cannot take a gradient ", describe(g));
    if (!acc.device().is_meta()) {
      kernels::binary(detail::ctx_of(acc), kernels::BinaryOp::add, acc.dtype(),
                      kernels::make_broadcast(acc.shape(), acc.shape(), g.shape()), acc.data_ptr(),
                      g.data_ptr(), acc.data_ptr());
    }
    acc.bump_version();
  } else {
    // The incoming gradient may alias another tensor (e.g. add passes one gradient to both
    // inputs, or it is the very tensor the caller gave backward()); give the leaf its own copy
    // so in-place updates of .grad stay local. Both counts: the caller's handle shares the
    // TensorImpl, not just the storage.
    bool shared = !sole_owner(g);
    leaf_->grad = (shared ? g.clone() : g).detach().impl_ptr();
  }
  run_post_accumulate_hooks(leaf_);
  return {};
}

uint64_t next_sequence_nr() { return g_next_sequence_nr++; }

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

Edge edge_of(const Tensor& t) {
  TensorImpl& impl = t.impl();
  if (impl.grad_fn) return {impl.grad_fn, impl.output_nr, t.device(), t.numel()};
  if (!impl.requires_grad) return {};
  std::shared_ptr<Node> acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->sequence_nr = g_next_sequence_nr++;
    impl.grad_accumulator = acc;
  }
  return {acc, 0, t.device(), t.numel()};
}

// Note [Gradient dtypes]
// A gradient may reach an input in another floating dtype than the input's: conv2d under
// autocast writes its weight gradient in the parameter's f32 for the lowered f16 weight, and the
// cast node behind it takes it as it is (no cast down and up again). So backward functions read
// the gradient in its own dtype and cast operands they combine it with (matmul's), and the engine
// casts nothing; AccumulateGrad keeps a leaf's gradient in the leaf's dtype. What the engine
// refuses is a gradient of another device or size, before any backward reads past it.
Tensor checked_gradient(const Node& node, size_t i, const Edge& e, Tensor g) {
  FRUGAL_CHECK(g.device() == e.device && g.numel() == e.numel, "backward: '", node.name(),
               "' returned for its input ", i, " a gradient ", describe(g), ", but the input has ",
               e.numel, " elements on ", e.device);
  return g;
}

std::vector<Tensor> record(const std::string& name, const std::vector<Tensor>& inputs,
                           std::vector<Tensor> outputs, BackwardFn fn) {
  if (!any_requires_grad(inputs)) return outputs;
  return record(
      name, inputs, std::move(outputs), {},
      [fn = std::move(fn)](const std::vector<Tensor>& g, std::vector<Tensor>&) { return fn(g); });
}

std::vector<Tensor> record(const std::string& name, const std::vector<Tensor>& inputs,
                           std::vector<Tensor> outputs, std::vector<SavedTensor> saved,
                           SavedBackwardFn fn) {
  if (!any_requires_grad(inputs)) {
    for (Tensor& out : outputs) {
      if (out.defined()) out.impl().recipe.reset();  // nothing will save it for backward
    }
    return outputs;
  }
  auto node = std::make_shared<FunctionNode>(name, std::move(saved), std::move(fn));
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->sequence_nr = g_next_sequence_nr++;
  node->module = memory::current_module_path();
  for (const Tensor& out : outputs) node->output_bytes += out.defined() ? out.nbytes() : 0;
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    node->next_edges.push_back(in.defined() && in.requires_grad() ? edge_of(in) : Edge{});
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) continue;
    TensorImpl& impl = outputs[i].impl();
    impl.grad_fn = node;
    impl.output_nr = static_cast<uint32_t>(i);
    if (impl.recipe != nullptr) {  // the node owns it from now on; the tensor only refers to it
      impl.recipe_weak = impl.recipe;
      node->own_recipe(std::move(impl.recipe));
      impl.recipe.reset();
    }
  }
  return outputs;
}

Tensor record(const std::string& name, const std::vector<Tensor>& inputs, Tensor output,
              BackwardFn fn) {
  return record(name, inputs, std::vector<Tensor>{std::move(output)}, std::move(fn))[0];
}

Tensor record(const std::string& name, const std::vector<Tensor>& inputs, Tensor output,
              std::vector<SavedTensor> saved, SavedBackwardFn fn) {
  return record(name, inputs, std::vector<Tensor>{std::move(output)}, std::move(saved),
                std::move(fn))[0];
}

namespace {

// Every node reachable from roots, in creation order.
std::vector<Node*> graph_nodes(const std::vector<Tensor>& roots) {
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack, out;
  for (const Tensor& r : roots) {
    if (r.defined() && r.grad_fn() && seen.insert(r.grad_fn().get()).second) {
      stack.push_back(r.grad_fn().get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    out.push_back(n);
    for (const Edge& e : n->next_edges) {
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Node* a, const Node* b) { return a->sequence_nr < b->sequence_nr; });
  return out;
}

std::string module_prefix(const Node& n, int depth) {
  if (!n.module) return "";
  if (depth <= 0) return *n.module;
  size_t end = 0;
  for (int d = 0; d < depth; ++d) {
    end = n.module->find('.', d == 0 ? 0 : end + 1);
    if (end == std::string::npos) return *n.module;
  }
  return n.module->substr(0, end);
}

}  // namespace

size_t saved_bytes(const std::vector<Tensor>& roots) {
  size_t total = 0;
  for (const ModuleSaved& m : saved_bytes_by_module(roots, 1)) total += m.saved_bytes;
  return total;
}

std::vector<ModuleSaved> saved_bytes_by_module(const std::vector<Tensor>& roots, int depth) {
  std::vector<ModuleSaved> out;
  std::unordered_map<std::string, size_t> index;
  std::unordered_set<const Storage*> counted;
  for (Node* n : graph_nodes(roots)) {
    const std::string key = module_prefix(*n, depth);
    auto [it, fresh] = index.emplace(key, out.size());
    if (fresh) out.push_back({key, 0, 0});
    ModuleSaved& row = out[it->second];
    if (n->name() == "conv2d") row.conv_output_bytes += n->output_bytes;
    std::vector<const SavedTensor*> saved;
    n->collect_saved(saved);
    std::unordered_set<const Storage*> storages;
    for (const SavedTensor* s : saved) s->collect_storages(storages);
    for (const Storage* st : storages) {
      if (counted.insert(st).second) row.saved_bytes += st->nbytes;
    }
  }
  return out;
}

namespace {

void run_graph(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
               bool retain_graph) {
  NoGradGuard no_grad;  // gradients are computed without building a graph of their own
  // Each op's backward runs in the dtype its forward used, whatever autocast says now.
  autocast::SuspendGuard no_autocast;

  // Count, for every reachable node, how many edges lead into it.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  std::vector<Edge> root_edges;
  for (const Tensor& r : roots) {
    Edge e = edge_of(r);
    root_edges.push_back(e);
    if (e.node && seen.insert(e.node.get()).second) {
      stack.push_back(e.node.get());
      keep_alive.push_back(e.node);
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      deps[e.node.get()]++;
      if (seen.insert(e.node.get()).second) {
        stack.push_back(e.node.get());
        keep_alive.push_back(e.node);
      }
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, BySequence> ready;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Edge& e = root_edges[i];
    if (!e.node) continue;
    auto& buf = buffers[e.node.get()];
    buf.resize(e.node->num_outputs);
    accumulate_into(buf, e.input_nr, grads[i]);
  }
  for (const Edge& e : root_edges) {
    if (e.node && deps[e.node.get()] == 0) {
      deps[e.node.get()] = -1;  // queued
      ready.push(e.node.get());
    }
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    // What the node allocates, and the sums of the gradients it passes on, are tagged
    // "<op> backward" under the module it was recorded in (Note [Allocation events]); the name is
    // only looked up when someone observes.
    const std::string name = memory::observing() ? node->name() : std::string();
    memory::OpScope op(name.empty() ? nullptr : name.c_str(), /*backward=*/true);
    memory::ModuleScope module(node->module);
    std::vector<Tensor> in;
    if (auto it = buffers.find(node); it != buffers.end()) {
      in = std::move(it->second);
      buffers.erase(it);
    }
    in.resize(node->num_outputs);
    bool any = false;
    for (const Tensor& g : in) any = any || g.defined();
    std::vector<Tensor> out;
    if (any) out = node->apply(std::move(in));
    in.clear();
    if (!retain_graph) node->release_saved();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.node) continue;
      if (i < out.size() && out[i].defined()) {
        auto& buf = buffers[e.node.get()];
        buf.resize(e.node->num_outputs);
        accumulate_into(buf, e.input_nr, checked_gradient(*node, i, e, std::move(out[i])));
      }
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  if (t_backward_callbacks != nullptr) {  // inside a backward (a checkpointed segment's)
    run_graph(roots, grads, retain_graph);
    return;
  }
  // Note [Gradient hooks]: callbacks queued during this backward run once it has finished;
  // a failed backward drops them.
  std::vector<std::function<void()>> callbacks;
  t_backward_callbacks = &callbacks;
  try {
    run_graph(roots, grads, retain_graph);
  } catch (...) {
    t_backward_callbacks = nullptr;
    throw;
  }
  t_backward_callbacks = nullptr;
  // They run outside backward: one that queues another gets queue_callback's error.
  for (auto& fn : callbacks) fn();
}

}  // namespace frugal::autograd
