// Tensor basics: allocation, views, device moves, host read-back and printing.
#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "base/half.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"

namespace frugal {

Tensor Tensor::empty(const Shape& shape, TensorOptions opts) {
  const size_t nbytes = checked_nbytes(shape, dtype_size(opts.dtype), "empty");
  Tensor t = over(shape, opts, memory::allocator_for(opts.device).allocate(nbytes));
  if (opts.requires_grad) {
    FRUGAL_CHECK(is_floating(opts.dtype), "requires_grad: only floating tensors can require ",
                 "gradients, got ", opts.dtype);
  }
  return t;
}

void Storage::run_deferred() const {
  std::shared_ptr<const DeferredWrite> w = std::move(deferred);
  deferred = nullptr;
  try {
    w->write(data.get());
  } catch (...) {
    deferred = std::move(w);  // still owed: the next read fails the same way, never reads garbage
    throw;
  }
}

bool Tensor::write_sum_of_deferred(const Tensor& other, void* out) const {
  // Held here: reading other may run this very write (x + x) and release the storage's handle.
  std::shared_ptr<const DeferredWrite> w = impl().storage->deferred;
  return w != nullptr && w->write_sum(other, out);
}

void Tensor::defer_write(std::shared_ptr<const DeferredWrite> w) const {
  FRUGAL_CHECK(impl().storage->deferred == nullptr, "defer_write: the bytes of ", describe(*this),
               " already owe a write");
  impl().storage->deferred = std::move(w);
}

Tensor Tensor::over(const Shape& shape, TensorOptions opts, memory::DataPtr data) {
  auto storage = std::make_shared<Storage>();
  storage->device = opts.device;
  storage->nbytes = static_cast<size_t>(shape.numel()) * dtype_size(opts.dtype);
  storage->data = std::move(data);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->dtype = opts.dtype;
  impl->requires_grad = opts.requires_grad;
  return Tensor(std::move(impl));
}

template <typename T>
T* Tensor::data() const {
  constexpr bool ok16 = std::is_same_v<T, uint16_t>;
  DType d = dtype();
  bool match = (std::is_same_v<T, float> && d == DType::f32) ||
               (std::is_same_v<T, double> && d == DType::f64) ||
               (std::is_same_v<T, int64_t> && d == DType::i64) ||
               (std::is_same_v<T, uint8_t> && d == DType::u8) ||
               (ok16 && (d == DType::f16 || d == DType::bf16));
  FRUGAL_CHECK(match, "data<T>: element type does not match tensor ", describe(*this));
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template uint16_t* Tensor::data<uint16_t>() const;

Tensor Tensor::reshape(const Shape& shape) const { return frugal::reshape(*this, shape); }

Tensor Tensor::flatten(int64_t start_dim) const {
  int64_t s = shape().dim(start_dim);
  std::vector<int64_t> dims(shape().dims().begin(), shape().dims().begin() + s);
  int64_t rest = 1;
  for (int64_t i = s; i < ndim(); ++i) rest *= shape()[i];
  dims.push_back(rest);
  return reshape(Shape(dims));
}

Tensor Tensor::to(DType dtype) const { return cast(*this, dtype); }

static Tensor move_raw(const Tensor& t, Device device) {
  Tensor out = Tensor::empty(t.shape(), {t.dtype(), device});
  if (device.is_meta() || t.device().is_meta()) {
    FRUGAL_CHECK(device.is_meta(), "to: cannot materialise data of a meta tensor on ", device);
    return out;
  }
  Device kernel_device = device.is_cuda() ? device : t.device();
  kernels::copy_bytes(kernels::Context::of(kernel_device), device, out.data_ptr(), t.device(),
                      t.data_ptr(), t.nbytes());
  return out;
}

Tensor Tensor::to(Device device) const {
  memory::OpScope op_scope("to");  // Note [Allocation events]
  if (device == this->device()) return *this;
  Tensor out = move_raw(*this, device);
  Device from = this->device();
  return autograd::record(
      "to_device", {*this}, out,
      [from](const std::vector<Tensor>& g) -> std::vector<Tensor> { return {g[0].to(from)}; });
}

Tensor Tensor::clone() const {
  memory::OpScope op_scope("clone");  // Note [Allocation events]
  Tensor out = move_raw(*this, device());
  return autograd::record(
      "clone", {*this}, out,
      [](const std::vector<Tensor>& g) -> std::vector<Tensor> { return {g[0]}; });
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->shape = shape();
  impl->dtype = dtype();
  impl->name = name();
  return Tensor(std::move(impl));
}

std::vector<double> Tensor::to_vector() const {
  FRUGAL_CHECK(!device().is_meta(), "to_vector: meta tensor ", describe(*this), " has no data");
  Tensor host = device().is_cpu() ? *this : detach().to(Device::cpu());
  std::vector<double> out(static_cast<size_t>(numel()));
  const void* p = host.data_ptr();
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype()) {
      case DType::f32:
        out[i] = static_cast<const float*>(p)[i];
        break;
      case DType::f64:
        out[i] = static_cast<const double*>(p)[i];
        break;
      case DType::f16:
        out[i] = f16_to_float(static_cast<const uint16_t*>(p)[i]);
        break;
      case DType::bf16:
        out[i] = bf16_to_float(static_cast<const uint16_t*>(p)[i]);
        break;
      case DType::i64:
        out[i] = static_cast<double>(static_cast<const int64_t*>(p)[i]);
        break;
      case DType::u8:
        out[i] = static_cast<const uint8_t*>(p)[i];
        break;
    }
  }
  return out;
}

double Tensor::item() const {
  FRUGAL_CHECK(numel() == 1, "item: tensor ", describe(*this), " has ", numel(),
               " elements, expected 1");
  return to_vector()[0];
}

bool Tensor::requires_grad() const { return impl().requires_grad || impl().grad_fn != nullptr; }

Tensor& Tensor::requires_grad_(bool on) {
  if (on && !is_leaf()) return *this;  // a computed tensor requires grad already (torch: a no-op)
  FRUGAL_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad; use ",
               "detach() for a copy without history");
  FRUGAL_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require ",
               "gradients, got ", dtype());
  impl().requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  if (!g.defined()) {
    impl().grad.reset();
    return;
  }
  // The dtype too, as PyTorch's "assigned grad has data of a different type": backward would
  // otherwise add its own gradients to one of another dtype and leave .grad in that dtype.
  FRUGAL_CHECK(g.shape() == shape() && g.device() == device() && g.dtype() == dtype(),
               "set_grad: gradient ", describe(g), " does not match tensor ", describe(*this));
  impl().grad = g.detach().impl_ptr();
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  FRUGAL_CHECK(requires_grad(), "backward: tensor ", describe(*this),
               " does not require grad and has no grad_fn");
  Tensor g = grad;
  if (!g.defined()) {
    FRUGAL_CHECK(numel() == 1, "backward: grad can be implicitly created only for scalar ",
                 "outputs, got ", describe(*this), "; pass a gradient of the same shape");
    g = full(shape(), 1.0, options());
  }
  FRUGAL_CHECK(g.shape() == shape(), "backward: gradient shape ", g.shape(),
               " does not match tensor shape ", shape());
  FRUGAL_CHECK(g.device() == device(), "backward: gradient ", describe(g), " is not on ", device(),
               " as the tensor ", describe(*this), " is");
  // As PyTorch's engine: the seed takes the output's dtype. An f32 seed for an f16 output went
  // on into backward functions that read operands as one dtype (matmul's read f16 bytes as f32).
  if (g.dtype() != dtype()) g = cast(g, dtype());
  autograd::run_backward({*this}, {g}, retain_graph);
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "(undefined)";
  return detail::str(t.shape(), " ", t.dtype(), " ", t.device());
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << "tensor(";
  if (!defined()) return "tensor(undefined)";
  if (device().is_meta()) {
    os << "<meta>";
  } else {
    std::vector<double> v = to_vector();
    constexpr size_t kShown = 8;
    os << "[";
    for (size_t i = 0; i < v.size() && i < kShown; ++i) os << (i ? ", " : "") << v[i];
    if (v.size() > kShown) os << ", ...";
    os << "]";
  }
  os << ", shape=" << shape() << ", dtype=" << dtype() << ", device=" << device();
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace frugal
