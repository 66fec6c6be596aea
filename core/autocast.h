// Autocast: thread-local mixed-precision state, one per device type, and the per-op policy
// (core/autocast_policy.cpp) that ops apply to their inputs at their single entry point.
//
//   {
//     frugal::AutocastGuard amp(Device::cuda(), DType::f16);   // or bf16; nestable
//     Tensor logits = model.forward(x);                       // conv/linear/matmul in f16
//     Tensor loss = nn::functional::cross_entropy(logits, y);  // f32
//   }                                                         // state restored, cache cleared
//   scaler.scale(loss).backward();                            // parameter grads arrive in f32
//
// Note [Autocast cache]: a lowered f32 parameter (a leaf that requires grad) is cast once and the
// low-precision copy is reused until the outermost guard ends, keyed by its TensorImpl and its
// version, so an optimizer step (which bumps the version) invalidates it. Nothing is cached
// under NoGradGuard (PyTorch's leak, pytorch#65766). The cached copy's cast node saves nothing
// and survives backward, so several forward/backward passes may share it (accumulation).
// A region that starts with the parameter the previous one started with lowers all of the
// previous region's parameters at its first cast, in one launch per few dozen (Note [Lowering a
// forward's parameters together] in core/autocast.cpp), and conv weight gradients come back in
// f32 without a cast (grad_dtype below): a MobileNetV2 f16 step launches about 110 casts fewer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace frugal {

// What autocast does to an op's floating inputs (STYLE 6).
enum class AutocastPolicy : uint8_t {
  lower,    // floating inputs but f64 are cast to the autocast dtype (f16/bf16; the other 16-bit
            // one too), accumulation stays f32
  f32,      // f16/bf16 inputs are cast up to f32
  promote,  // mixed inputs run in the widest type, a 0-d one aside (the ops do this themselves)
  pass,     // inputs are used as they are
};

// Every op with an autocast policy; keep in step with the table in core/autocast_policy.cpp.
// Only lower and f32 ops call autocast::apply; promote and pass ops are listed so the table is
// the one place that says what happens to each op.
enum class AutocastOp : uint8_t {
  conv2d,
  linear,
  matmul,  // lower
  cross_entropy,
  batch_norm,
  sum,
  mean,  // f32
  softmax,
  log_softmax,
  exp,
  log,
  rsqrt,
  pow,
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,  // promote
  relu,
  relu6,
  hardswish,
  silu,
  sigmoid,  // pass
  max_pool2d,
  avg_pool2d,
  global_avg_pool,
  dropout,
  reshape,
  kCount
};
constexpr size_t kNumAutocastOps = static_cast<size_t>(AutocastOp::kCount);

AutocastPolicy autocast_policy(AutocastOp op);
const char* autocast_op_name(AutocastOp op);

// Enables (or, with enabled = false, disables) autocast to `dtype` for `device`'s type on this
// thread until destroyed; restores the previous state. The outermost guard clears the cache.
class AutocastGuard {
 public:
  AutocastGuard(Device device, DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType type_;
  bool prev_enabled_;
  DType prev_dtype_;
};

namespace autocast {

bool is_enabled(DeviceType type);
// The low-precision type of `type` (meaningful while enabled).
DType dtype(DeviceType type);

// `t` as op `op`'s policy wants it under the current state: lower casts f32 to the autocast
// dtype (through the cache for parameters), f32 casts f16/bf16 up; both casts are
// differentiable. Returns t itself when autocast is off for t's device or nothing applies.
Tensor apply(AutocastOp op, const Tensor& t);

// Number of cached low-precision parameter copies on this thread (tests, diagnostics).
size_t cache_size();

// The dtype t's gradient is wanted in: the parameter's dtype (f32) when t is a cached
// low-precision copy, else t's own dtype. Ops whose kernels can write that dtype directly (conv's
// weight gradient on CUDA) do, and the cast node then passes the gradient through: one cast
// launch less per weight in backward. Undefined t gives f32.
DType grad_dtype(const Tensor& t);

// Whether `node` is the cast node of a cached parameter copy: it saves nothing, is never
// released, and leads to the parameter alone, so a checkpoint's replay that reuses a copy cached
// before it may run it (Note [Checkpointing] in nn/checkpoint.h).
bool is_parameter_cast(const autograd::Node& node);

// Turns autocast off for every device type until destroyed (the engine runs backward under it:
// each op's backward runs in the dtype its forward used). A guard inside re-enables.
class SuspendGuard {
 public:
  SuspendGuard();
  ~SuspendGuard();
  SuspendGuard(const SuspendGuard&) = delete;
  SuspendGuard& operator=(const SuspendGuard&) = delete;

 private:
  bool prev_[3];
};

// The autocast state of every device type, as a checkpointed segment saw it in its forward.
struct Snapshot {
  bool enabled[3] = {false, false, false};  // cpu, cuda, meta
  DType dtype[3] = {DType::bf16, DType::f16, DType::f16};
};
Snapshot snapshot();

// Sets the state of `s` until destroyed (activation checkpointing replays a forward inside
// backward, where the engine has suspended autocast). Unlike AutocastGuard it keeps the
// parameter cast cache of an enclosing region; copies it made itself are dropped on exit when no
// region encloses it.
class RestoreGuard {
 public:
  explicit RestoreGuard(const Snapshot& s);
  ~RestoreGuard();
  RestoreGuard(const RestoreGuard&) = delete;
  RestoreGuard& operator=(const RestoreGuard&) = delete;

 private:
  Snapshot prev_;
};

}  // namespace autocast
}  // namespace frugal
