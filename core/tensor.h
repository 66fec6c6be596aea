// Tensor: a shared handle to contiguous storage from the device allocator, with shape, dtype,
// device and autograd metadata. Copies of a Tensor alias the same data (like torch::Tensor);
// `reshape` is the only view. Data on the meta device is shape and byte count only.
//
//   Tensor x = randn({8, 32, 32, 3}, gen, {.device = Device::cuda()});   // NHWC
//   Tensor w = zeros({16, 3, 3, 3}, {.requires_grad = true});
//   Tensor loss = ...; loss.backward(); w.grad();
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/shape.h"
#include "memory/allocator.h"

namespace frugal {

namespace autograd {
class Node;
struct Recipe;
}  // namespace autograd

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

// Note [Deferred writes]
// An op may hand out a tensor whose bytes are allocated but not yet written, with the write
// attached to its storage: the first read of the bytes (Tensor::data_ptr, whoever calls it) runs
// it, so every reader sees the values the op promised. A consumer that can compute from the
// write's own inputs instead asks for it (Tensor::deferred_write) and leaves the bytes unwritten:
// batch norm's output read by a depthwise convolution, which normalizes z as it loads it (Note
// [Batch norm inside the depthwise convolution] in kernels/conv.h), so that pass and its traffic
// are gone. The write must not depend on anything written in place since; it checks. Like the
// rest of a tensor's metadata the pending write is not synchronised: one thread runs a step.
class Tensor;

class DeferredWrite {
 public:
  virtual ~DeferredWrite() = default;
  // Writes the storage's bytes at `out`.
  virtual void write(void* out) const = 0;
  // Writes other + the promised values at `out` (another tensor's bytes, shaped and typed like
  // other) in one pass and leaves this write owed; false, writing nothing, where the write has no
  // such pass or other does not fit it. A residual add calls it (Note [Residual sums of deferred
  // batch norms] in nn/batch_norm_deferred.h).
  virtual bool write_sum(const Tensor& other, void* out) const {
    (void)other, (void)out;
    return false;
  }
};

// The bytes behind one or more tensors (a tensor and its reshapes share one Storage).
struct Storage {
  memory::DataPtr data;
  Device device;
  size_t nbytes = 0;
  // Bumped by every in-place write through any tensor sharing these bytes (optimizer steps,
  // running statistics, copy_/fill_): a saved tensor compares it with the value it saw.
  uint64_t version = 0;
  // Note [Deferred writes]: null once written (or when there never was one).
  mutable std::shared_ptr<const DeferredWrite> deferred = nullptr;
  void* ptr() const {
    if (deferred != nullptr) run_deferred();
    return data.get();
  }
  // Runs the deferred write now, once; a write that throws stays owed, so every later read throws
  // too instead of reading unwritten bytes.
  void run_deferred() const;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  DType dtype = DType::f32;
  bool requires_grad = false;  // leaves only; non-leaves require grad through grad_fn
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this is
  std::weak_ptr<autograd::Node> grad_accumulator;
  // How to recompute this tensor from what backward keeps anyway (Note [Saved tensors] in
  // core/saved_tensor.h), valid while storage->version equals recipe_version. Owned by the node
  // that produced the tensor (autograd::record moves it there), so it lives as long as backward
  // may still need it and never keeps its inputs alive past that.
  std::shared_ptr<const autograd::Recipe> recipe;
  std::weak_ptr<const autograd::Recipe> recipe_weak;
  uint64_t recipe_version = 0;
  std::string name;  // optional tag for error messages and debugging
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // Uninitialised tensor from the device's allocator (counted). Prefer the factories.
  static Tensor empty(const Shape& shape, TensorOptions opts = {});
  // A tensor of `shape` and `opts` over `data`, memory of opts.device allocated for its bytes
  // (empty, and the parts of one allocation in core/flat_tensors.h). No checks: the caller's.
  static Tensor over(const Shape& shape, TensorOptions opts, memory::DataPtr data);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t size(int64_t dim) const { return shape()[shape().dim(dim)]; }
  int64_t ndim() const { return shape().ndim(); }
  int64_t numel() const { return shape().numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  TensorOptions options() const { return {dtype(), device(), false}; }

  void* data_ptr() const { return impl().storage->ptr(); }
  // The write still owed to this tensor's bytes (Note [Deferred writes]), or null. Reading it
  // does not run it.
  const DeferredWrite* deferred_write() const { return impl().storage->deferred.get(); }
  // Attaches `w` to this tensor's bytes, which it promises to write on their first read.
  void defer_write(std::shared_ptr<const DeferredWrite> w) const;
  // other + this tensor at `out` through the owed write's write_sum, these bytes left unwritten;
  // false when nothing is owed or the write cannot.
  bool write_sum_of_deferred(const Tensor& other, void* out) const;
  // The pointer for a write of every byte (fill_, copy_): a pending write is dropped, not run
  // (a tensor spans its whole storage: reshape is the only view).
  void* data_ptr_for_overwrite() const {
    impl().storage->deferred = nullptr;
    return impl().storage->data.get();
  }
  // Typed pointer; checks that T matches the dtype (uint16_t for f16/bf16).
  template <typename T>
  T* data() const;

  // Views and copies.
  Tensor reshape(const Shape& shape) const;  // shares storage; -1 infers one extent
  Tensor flatten(int64_t start_dim = 1) const;
  Tensor to(Device device) const;  // no copy when already there
  Tensor to(DType dtype) const;    // differentiable cast; no copy when already that dtype
  Tensor clone() const;            // differentiable deep copy
  Tensor detach() const;           // same storage, no history
  double item() const;             // one-element tensor to double (synchronises)
  // All values as doubles on the host (for tests, printing and small tensors).
  std::vector<double> to_vector() const;
  std::string str() const;

  // Autograd.
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
  void set_grad(const Tensor& g);
  void zero_grad() { impl().grad.reset(); }  // set_to_none, PyTorch 2's default
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  // Backpropagates from this tensor. Without `grad` the tensor must have one element.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  void bump_version() const { impl().storage->version++; }
  uint64_t version() const { return impl().storage->version; }
  Tensor& set_name(std::string name) {
    impl().name = std::move(name);
    return *this;
  }
  const std::string& name() const { return impl().name; }

  TensorImpl& impl() const {
    FRUGAL_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// "[8, 3, 32, 32] f32 cuda:0" for error messages.
std::string describe(const Tensor& t);

}  // namespace frugal
