// Max, average and global average pooling over NHWC, forward and backward.
#include "core/autograd.h"
#include "core/op_util.h"
#include "kernels/conv_workspace.h"
#include "kernels/pooling.h"
#include "nn/functional.h"

namespace frugal::nn::functional {
namespace {

using detail::cast_raw;

kernels::Pool2dShape pool_shape(const char* op, const Tensor& x, const Pool2dOptions& o) {
  FRUGAL_CHECK(x.ndim() == 4, op, ": expected x [N, H, W, C], got ", describe(x));
  int64_t stride = o.stride == 0 ? o.kernel : o.stride;
  FRUGAL_CHECK(o.kernel > 0 && stride > 0 && o.padding >= 0 && 2 * o.padding <= o.kernel, op,
               ": bad options kernel=", o.kernel, " stride=", stride, " padding=", o.padding,
               " (padding must be at most half the kernel)");
  kernels::Pool2dShape s;
  s.n = x.size(0), s.h = x.size(1), s.w = x.size(2), s.c = x.size(3);
  s.kh = s.kw = o.kernel;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = o.padding;
  s.count_include_pad = o.count_include_pad;
  FRUGAL_CHECK(s.oh() > 0 && s.ow() > 0, op, ": input ", describe(x), " is smaller than the ",
               o.kernel, "x", o.kernel, " window");
  return s;
}

// Runs `body(xc)` on the compute-dtype view of x and rounds the result back (Note [CPU dtypes]).
template <typename Body>
Tensor in_compute_dtype(const Tensor& x, Body body) {
  if (!detail::cpu_half(x)) return body(x);
  return cast_raw(body(cast_raw(x, DType::f32)), x.dtype());
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Pool2dOptions opt) {
  memory::OpScope op_scope("max_pool2d");  // Note [Allocation events]
  detail::check_defined("max_pool2d", {&x});
  kernels::Pool2dShape s = pool_shape("max_pool2d", x, opt);
  Tensor y = in_compute_dtype(x, [&](const Tensor& xc) {
    Tensor out = Tensor::empty(Shape{s.n, s.oh(), s.ow(), s.c}, xc.options());
    kernels::max_pool2d_forward(detail::ctx_of(xc), xc.dtype(), s, xc.data_ptr(), out.data_ptr());
    return out;
  });
  return autograd::record(
      "max_pool2d", {x}, y, {x},
      [s](const std::vector<Tensor>& g, const std::vector<Tensor>& saved) {
        const Tensor& x_saved = saved[0];
        Tensor gx = cast_raw(g[0], x_saved.dtype());
        Tensor dx = in_compute_dtype(x_saved, [&](const Tensor& xc) {
          Tensor gc = cast_raw(gx, xc.dtype());
          Tensor out = Tensor::empty(xc.shape(), xc.options());
          if (!xc.device().is_meta()) {
            kernels::max_pool2d_backward(detail::ctx_of(xc), xc.dtype(), s, xc.data_ptr(),
                                         gc.data_ptr(), out.data_ptr());
          } else if (kernels::meta_predicts_cuda()) {  // the CUDA scratch
            memory::DataPtr scratch =
                detail::ctx_of(xc).workspace(kernels::cuda_max_pool_backward_scratch_bytes(s));
          }
          return out;
        });
        return std::vector<Tensor>{dx};
      });
}

Tensor avg_pool2d(const Tensor& x, Pool2dOptions opt) {
  memory::OpScope op_scope("avg_pool2d");  // Note [Allocation events]
  detail::check_defined("avg_pool2d", {&x});
  kernels::Pool2dShape s = pool_shape("avg_pool2d", x, opt);
  Tensor y = in_compute_dtype(x, [&](const Tensor& xc) {
    Tensor out = Tensor::empty(Shape{s.n, s.oh(), s.ow(), s.c}, xc.options());
    kernels::avg_pool2d_forward(detail::ctx_of(xc), xc.dtype(), s, xc.data_ptr(), out.data_ptr());
    return out;
  });
  return autograd::record("avg_pool2d", {x}, y,
                          [s, dtype = x.dtype()](const std::vector<Tensor>& g) {
                            Tensor gx = cast_raw(g[0], dtype);
                            Tensor dx = in_compute_dtype(gx, [&](const Tensor& gc) {
                              Tensor out = Tensor::empty(Shape{s.n, s.h, s.w, s.c}, gc.options());
                              kernels::avg_pool2d_backward(detail::ctx_of(gc), gc.dtype(), s,
                                                           gc.data_ptr(), out.data_ptr());
                              return out;
                            });
                            return std::vector<Tensor>{dx};
                          });
}

Tensor global_avg_pool(const Tensor& x) {
  memory::OpScope op_scope("global_avg_pool");  // Note [Allocation events]
  detail::check_defined("global_avg_pool", {&x});
  FRUGAL_CHECK(x.ndim() == 4, "global_avg_pool: expected x [N, H, W, C], got ", describe(x));
  const int64_t n = x.size(0), hw = x.size(1) * x.size(2), c = x.size(3);
  Shape in_shape = x.shape();
  // 16-bit inputs are computed in f32 inside the kernel, as are their gradients.
  Tensor y = Tensor::empty(Shape{n, 1, 1, c}, x.options());
  kernels::global_avg_pool_forward(detail::ctx_of(x), x.dtype(), n, hw, c, x.data_ptr(),
                                   y.data_ptr());
  return autograd::record("global_avg_pool", {x}, y,
                          [n, hw, c, in_shape, dtype = x.dtype()](const std::vector<Tensor>& g) {
                            Tensor gx = cast_raw(g[0], dtype);
                            Tensor dx = Tensor::empty(in_shape, gx.options());
                            kernels::global_avg_pool_backward(detail::ctx_of(gx), gx.dtype(), n, hw,
                                                              c, gx.data_ptr(), dx.data_ptr());
                            return std::vector<Tensor>{dx};
                          });
}

}  // namespace frugal::nn::functional
