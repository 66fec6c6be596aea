// Tensor factories: constant fills, seeded random draws, ranges and host data.
#include "core/factory.h"

#include <cmath>
#include <cstring>

#include "base/half.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"
#include "kernels/random.h"

namespace frugal {

namespace {
// Generators capturing on this thread; a draw from any other one would be frozen into the graph.
thread_local int capturing_generators = 0;
}  // namespace

uint64_t Generator::take(uint64_t n) {
  FRUGAL_CHECK(capturing_generators == 0,
               "random draw while capturing a CUDA graph: only dropout on the capturing ",
               "generator can be replayed with fresh numbers (Note [Random draws in captured ",
               "graphs] in core/factory.h); draw before capturing");
  uint64_t o = offset_;
  offset_ += n;
  return o;
}

Generator::Draw Generator::draw(uint64_t n) {
  if (graph_base_ == nullptr) return {seed_, take(n), nullptr};
  FRUGAL_CHECK(offset_ >= graph_start_, "Generator::draw: offset ", offset_,
               " was set back before the capture's start ", graph_start_);
  const uint64_t o = offset_ - graph_start_;
  offset_ += n;
  return {seed_, o, graph_base_};
}

void Generator::begin_graph_capture(const uint64_t* offset_base) {
  FRUGAL_CHECK(offset_base != nullptr, "Generator::begin_graph_capture: null offset counter");
  FRUGAL_CHECK(graph_base_ == nullptr, "Generator::begin_graph_capture: already capturing");
  graph_base_ = offset_base;
  graph_start_ = offset_;
  ++capturing_generators;
}

uint64_t Generator::end_graph_capture() {
  FRUGAL_CHECK(graph_base_ != nullptr, "Generator::end_graph_capture: not capturing");
  graph_base_ = nullptr;
  --capturing_generators;
  return offset_ - graph_start_;
}

Generator& default_generator() {
  static Generator gen(0x5eed);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = Tensor::empty(shape, {opts.dtype, opts.device, false});
  fill_(t, value);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }

namespace {

// Draws into an f32/f64 tensor (16-bit CPU tensors draw in f32 and round, so values match a
// CUDA draw of the same dtype up to the final rounding).
template <typename Draw>
Tensor random_tensor(const Shape& shape, TensorOptions opts, Draw draw) {
  FRUGAL_CHECK(is_floating(opts.dtype), "random: expected a floating dtype, got ", opts.dtype);
  bool half_on_cpu = opts.device.is_cpu() && is_low_precision(opts.dtype);
  DType draw_dtype = half_on_cpu ? DType::f32 : opts.dtype;
  Tensor t = Tensor::empty(shape, {draw_dtype, opts.device, false});
  if (!opts.device.is_meta()) draw(t);
  if (half_on_cpu) t = detail::cast_raw(t, opts.dtype);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts, double lo, double hi) {
  FRUGAL_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi,
               "rand: expected finite bounds with lo <= hi for the range [lo, hi), got lo = ", lo,
               " and hi = ", hi);
  uint64_t offset = gen.take(static_cast<uint64_t>(shape.numel()));
  TensorOptions drawn = opts;
  drawn.requires_grad = false;
  Tensor t = random_tensor(shape, drawn, [&](const Tensor& d) {
    kernels::fill_uniform(detail::ctx_of(d), d.dtype(), d.numel(), d.data_ptr(), gen.seed(), offset,
                          lo, hi);
  });
  // Note [Uniform draws below hi]: the kernels keep f32/f64 draws below hi; a 16-bit CPU tensor,
  // drawn in f32, is checked again after its rounding, as the CUDA kernel checks after its own.
  if (opts.device.is_cpu() && is_low_precision(opts.dtype)) {
    Tensor lo_t = detail::cast_raw(full(shape, static_cast<float>(lo)), opts.dtype);
    // In f64, as the kernels compare: against t's own dtype, hi would be rounded first (f16's
    // 0.1 is 0.09998), and draws below hi would become lo.
    t = where(ge(detail::cast_raw(t, DType::f64), hi), lo_t, t);
  }
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts, double mean, double stddev) {
  // Two draws a value (Box-Muller): reserving n let the next draw reuse n of them, so the first
  // dropout masks after an initialisation were a function of the initial weights.
  uint64_t offset = gen.take(2 * static_cast<uint64_t>(shape.numel()));
  return random_tensor(shape, opts, [&](const Tensor& t) {
    kernels::fill_normal(detail::ctx_of(t), t.dtype(), t.numel(), t.data_ptr(), gen.seed(), offset,
                         mean, stddev);
  });
}

Tensor arange(int64_t n, TensorOptions opts) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
  return from_vector(v, Shape{n}, opts);
}

Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions opts) {
  Tensor host = Tensor::empty(shape, {dtype, Device::cpu(), false});
  if (host.nbytes() > 0) std::memcpy(host.data_ptr(), data, host.nbytes());
  Tensor out = opts.device.is_cpu() ? host : host.to(opts.device);
  if (opts.requires_grad) out.requires_grad_(true);
  return out;
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions opts) {
  FRUGAL_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
               " values for shape ", shape, " (", shape.numel(), " elements)");
  Tensor host = Tensor::empty(shape, {opts.dtype, Device::cpu(), false});
  void* p = host.data_ptr();
  for (size_t i = 0; i < values.size(); ++i) {
    double v = values[i];
    switch (opts.dtype) {
      case DType::f32:
        static_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case DType::f64:
        static_cast<double*>(p)[i] = v;
        break;
      case DType::f16:
        static_cast<uint16_t*>(p)[i] = float_to_f16(static_cast<float>(v));
        break;
      case DType::bf16:
        static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
        break;
      case DType::i64:
        static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
        break;
      case DType::u8:
        static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
        break;
    }
  }
  Tensor out = opts.device.is_cpu() ? host : host.to(opts.device);
  if (opts.requires_grad) out.requires_grad_(true);
  return out;
}

}  // namespace frugal
