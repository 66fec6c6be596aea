// Autocast state (thread-local, per device type), the guards, and the parameter cast cache
// (Note [Autocast cache] in core/autocast.h).
#include "core/autocast.h"

#include <unordered_map>
#include <vector>

#include "core/autograd.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/amp.h"

namespace frugal {
namespace {

constexpr size_t kNumDeviceTypes = 3;  // cpu, cuda, meta

struct DeviceState {
  bool enabled = false;
  DType dtype = DType::f16;
};

struct CacheEntry {
  std::weak_ptr<TensorImpl> source;  // guards against a freed impl whose address was reused
  uint64_t version = 0;
  Tensor low;  // the low-precision copy, with its cast node
};

struct ThreadState {
  // PyTorch's defaults: bf16 on the CPU, f16 elsewhere.
  DeviceState device[kNumDeviceTypes] = {
      {false, DType::bf16}, {false, DType::f16}, {false, DType::f16}};
  int depth = 0;  // guards alive on this thread; the cache lives while it is positive
  std::unordered_map<const TensorImpl*, CacheEntry> cache;
  // Note [Lowering a forward's parameters together]: the parameters the current and the previous
  // outermost region cast, in the order they were first cast.
  std::vector<std::weak_ptr<TensorImpl>> order, last_order;
  bool lowered_together = false;  // this region has tried to lower last_order at once
  // A recomputation's region (RestoreGuard at the outermost level, inside backward) is not a
  // forward region: the bookkeeping above is set aside while it runs and put back after, so the
  // next forward lowers the parameters of the last forward, whatever was recomputed between.
  struct Regions {
    std::vector<std::weak_ptr<TensorImpl>> order, last_order;
    bool lowered_together = false;
  };
  std::vector<Regions> set_aside;
};

thread_local ThreadState t_state;

DeviceState& state_of(DeviceType type) { return t_state.device[static_cast<size_t>(type)]; }

// The cast node of a cached copy. Unlike a FunctionNode it saves nothing and is never released,
// so a copy cached for one forward can carry gradients through several backward passes.
class CachedCastNode final : public autograd::Node {
 public:
  explicit CachedCastNode(DType from) : from_(from) {}
  std::string name() const override { return "autocast_cast"; }
  DType from() const { return from_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    // A no-op when the op already produced the gradient in from_ (autocast::grad_dtype).
    return {grads[0].defined() ? detail::cast_raw(grads[0], from_) : Tensor()};
  }

 private:
  DType from_;
};

// The cached copy of p in dtype, or an undefined tensor when there is none or it is stale.
Tensor cached(const Tensor& p, DType dtype) {
  auto it = t_state.cache.find(p.impl_ptr().get());
  if (it == t_state.cache.end()) return Tensor();
  const CacheEntry& e = it->second;
  bool fresh =
      e.source.lock() == p.impl_ptr() && e.version == p.version() && e.low.dtype() == dtype;
  return fresh ? e.low : Tensor();
}

// Gives `low` (p's values in a lower dtype) the cast node of a parameter copy.
void attach_cast_node(const Tensor& p, Tensor& low) {
  auto node = std::make_shared<CachedCastNode>(p.dtype());
  node->sequence_nr = autograd::next_sequence_nr();
  node->next_edges = {autograd::edge_of(p)};
  low.impl().grad_fn = node;
  low.impl().output_nr = 0;
}

// Gives `low` its cast node and caches it.
void insert(const Tensor& p, Tensor low) {
  attach_cast_node(p, low);
  bool inserted =
      t_state.cache.insert_or_assign(p.impl_ptr().get(), CacheEntry{p.impl_ptr(), p.version(), low})
          .second;
  if (inserted) t_state.order.push_back(p.impl_ptr());  // a stale entry keeps its place
}

// Note [Lowering a forward's parameters together]: a training loop casts the same parameters in
// the same order every forward, one small cast launch each (56 a step for MobileNetV2). When a
// region's first parameter cast asks for the parameter the previous region started with, every
// parameter of the previous region that is still alive, f32, on the same device, a leaf that
// requires grad and not cached yet is lowered now, with kernels::lower_many (one launch per few
// dozen tensors). The copies are what the region would have cached anyway by its end, so the
// peak does not change for a forward that uses them all; a region that starts elsewhere (an
// evaluation of part of the model) lowers one parameter at a time as before.
void lower_previous_region(const Tensor& first, DType dtype) {
  t_state.lowered_together = true;
  if (t_state.last_order.empty() || t_state.last_order.front().lock() != first.impl_ptr()) return;
  std::vector<Tensor> params, lows;
  std::vector<const float*> srcs;
  std::vector<void*> dsts;
  std::vector<int64_t> sizes;
  for (const std::weak_ptr<TensorImpl>& w : t_state.last_order) {
    std::shared_ptr<TensorImpl> impl = w.lock();
    if (impl == nullptr) continue;
    Tensor p(std::move(impl));
    if (p.dtype() != DType::f32 || p.device() != first.device() || !p.is_leaf() ||
        !p.requires_grad() || cached(p, dtype).defined()) {
      continue;
    }
    Tensor low = Tensor::empty(p.shape(), {dtype, p.device()});
    srcs.push_back(static_cast<const float*>(p.data_ptr()));
    dsts.push_back(low.data_ptr());
    sizes.push_back(p.numel());
    params.push_back(std::move(p));
    lows.push_back(std::move(low));
  }
  if (params.empty()) return;
  kernels::lower_many(detail::ctx_of(first), dtype, static_cast<int64_t>(params.size()),
                      srcs.data(), dsts.data(), sizes.data());
  for (size_t i = 0; i < params.size(); ++i) insert(params[i], std::move(lows[i]));
}

Tensor cast_parameter(const Tensor& p, DType dtype) {
  if (Tensor low = cached(p, dtype); low.defined()) return low;
  // A checkpoint's replay casts without caching: its copies, and the replay's own input (a leaf
  // that requires grad, as parameters are), would otherwise stay cached, and alive, until the
  // autocast region ends, past the backward that needed them when that backward runs inside the
  // region. The copy gets the same cast node, so the gradients are those of a cached copy.
  if (autograd::recomputing()) {
    Tensor low = detail::cast_raw(p, dtype);
    attach_cast_node(p, low);
    return low;
  }
  if (!t_state.lowered_together) {
    lower_previous_region(p, dtype);
    if (Tensor low = cached(p, dtype); low.defined()) return low;
  }
  Tensor low = detail::cast_raw(p, dtype);
  insert(p, low);
  return low;
}

}  // namespace

AutocastGuard::AutocastGuard(Device device, DType dtype, bool enabled) : type_(device.type) {
  // Disabled, any dtype is fine (torch.autocast(enabled=False) accepts any); the state keeps
  // its previous low-precision dtype then.
  FRUGAL_CHECK(!enabled || is_low_precision(dtype),
               "AutocastGuard: dtype must be f16 or bf16, got ", dtype, " (for ", device, ")");
  DeviceState& s = state_of(type_);
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  s.enabled = enabled;
  if (enabled) s.dtype = dtype;
  ++t_state.depth;
}

AutocastGuard::~AutocastGuard() {
  DeviceState& s = state_of(type_);
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  if (--t_state.depth == 0) {
    t_state.cache.clear();
    t_state.last_order = std::move(t_state.order);
    t_state.order.clear();
    t_state.lowered_together = false;
  }
}

namespace autocast {

bool is_enabled(DeviceType type) { return state_of(type).enabled; }
DType dtype(DeviceType type) { return state_of(type).dtype; }
size_t cache_size() { return t_state.cache.size(); }

bool is_parameter_cast(const autograd::Node& node) {
  return dynamic_cast<const CachedCastNode*>(&node) != nullptr;
}

DType grad_dtype(const Tensor& t) {
  if (!t.defined()) return DType::f32;
  auto* node = dynamic_cast<const CachedCastNode*>(t.impl().grad_fn.get());
  return node != nullptr ? node->from() : t.dtype();
}

Tensor apply(AutocastOp op, const Tensor& t) {
  if (!t.defined()) return t;
  const DeviceState& s = state_of(t.device().type);
  if (!s.enabled) return t;
  switch (autocast_policy(op)) {
    case AutocastPolicy::lower:
      // Every floating dtype but f64 (gradient checks) goes to the autocast dtype, the other
      // 16-bit one too, as PyTorch's cached_cast does; integer tensors are left alone. Only f32
      // parameters are cached (Note [Lowering a forward's parameters together]).
      if (t.dtype() == s.dtype || t.dtype() == DType::f64 || !is_floating(t.dtype())) return t;
      if (t.dtype() == DType::f32 && autograd::grad_enabled() && t.is_leaf() && t.requires_grad()) {
        return cast_parameter(t, s.dtype);
      }
      return cast(t, s.dtype);
    case AutocastPolicy::f32:
      return is_low_precision(t.dtype()) ? cast(t, DType::f32) : t;
    case AutocastPolicy::promote:
    case AutocastPolicy::pass:
      return t;
  }
  return t;
}

Snapshot snapshot() {
  Snapshot s;
  for (size_t i = 0; i < kNumDeviceTypes; ++i) {
    s.enabled[i] = t_state.device[i].enabled;
    s.dtype[i] = t_state.device[i].dtype;
  }
  return s;
}

RestoreGuard::RestoreGuard(const Snapshot& s) : prev_(snapshot()) {
  for (size_t i = 0; i < kNumDeviceTypes; ++i) t_state.device[i] = {s.enabled[i], s.dtype[i]};
  if (t_state.depth++ == 0) {
    t_state.set_aside.push_back(
        {std::move(t_state.order), std::move(t_state.last_order), t_state.lowered_together});
    t_state.order.clear();
    t_state.last_order.clear();
    t_state.lowered_together = true;  // a recomputation casts one parameter at a time
  }
}

RestoreGuard::~RestoreGuard() {
  for (size_t i = 0; i < kNumDeviceTypes; ++i) {
    t_state.device[i] = {prev_.enabled[i], prev_.dtype[i]};
  }
  if (--t_state.depth == 0) {
    t_state.cache.clear();
    ThreadState::Regions r = std::move(t_state.set_aside.back());
    t_state.set_aside.pop_back();
    t_state.order = std::move(r.order);
    t_state.last_order = std::move(r.last_order);
    t_state.lowered_together = r.lowered_together;
  }
}

SuspendGuard::SuspendGuard() {
  for (size_t i = 0; i < kNumDeviceTypes; ++i) {
    prev_[i] = t_state.device[i].enabled;
    t_state.device[i].enabled = false;
  }
}

SuspendGuard::~SuspendGuard() {
  for (size_t i = 0; i < kNumDeviceTypes; ++i) t_state.device[i].enabled = prev_[i];
}

}  // namespace autocast
}  // namespace frugal
