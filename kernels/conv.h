// 2-D convolution in NHWC with OHWI weights ([Cout, kh, kw, Cin/groups]): forward, input
// gradient and weight (+ bias) gradient. Groups and depthwise (groups == Cin) included.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/context.h"
#include "kernels/elementwise.h"  // Activation

namespace frugal::kernels {

struct Conv2dShape {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input  [N, H, W, C]
  int64_t k = 0;                       // output channels
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;

  // 0 when the (padded) input is smaller than the dilated kernel, as PyTorch's floor division
  // gives: C++'s division truncates toward 0, and a span in (-stride, 0) made one output.
  int64_t oh() const { return out_extent(h + 2 * pad_h - dil_h * (kh - 1) - 1, stride_h); }
  int64_t ow() const { return out_extent(w + 2 * pad_w - dil_w * (kw - 1) - 1, stride_w); }
  static int64_t out_extent(int64_t span, int64_t stride) {
    return span < 0 ? 0 : span / stride + 1;
  }
  int64_t cin_per_group() const { return c / groups; }
  int64_t cout_per_group() const { return k / groups; }
  bool depthwise() const { return groups == c && groups == k; }
  std::string str() const;  // for error messages and the algorithm cache key
};

// Whether f32 convolutions on CUDA may use TF32 tensor cores (products of 10-bit mantissas,
// f32 accumulation), as PyTorch lets cuDNN by default (torch.backends.cudnn.allow_tf32). On
// unless FRUGAL_ALLOW_TF32=0 is set; off gives FMA-only f32 convolutions that match the CPU to
// about 1e-5. Matrix products (cuBLAS) stay full f32, as PyTorch's do by default. 16-bit
// convolutions always use tensor cores.
void set_conv_allow_tf32(bool allow);
bool conv_allow_tf32();

// Sets conv_allow_tf32 for one scope and restores it (the tests' parity with the CPU at 1e-5
// needs f32 convolutions without TF32).
class Tf32Scope {
 public:
  explicit Tf32Scope(bool allow) : previous_(conv_allow_tf32()) { set_conv_allow_tf32(allow); }
  ~Tf32Scope() { set_conv_allow_tf32(previous_); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool previous_;
};

// y[N, OH, OW, K] = conv(x, w) (+ bias[K] when bias is not null)
FRUGAL_DECLARE_KERNEL(conv2d_forward,
                      (const Context& ctx, DType dtype, const Conv2dShape& s, const void* x,
                       const void* w, const void* bias, void* y),
                      (ctx, dtype, s, x, w, bias, y))
// dx[N, H, W, C] from dy[N, OH, OW, K] (overwritten, not accumulated)
FRUGAL_DECLARE_KERNEL(conv2d_backward_input,
                      (const Context& ctx, DType dtype, const Conv2dShape& s, const void* dy,
                       const void* w, void* dx),
                      (ctx, dtype, s, dy, w, dx))
// dw[K, kh, kw, C/groups] (and dbias[K] when not null) from x and dy (overwritten), stored in
// dw_dtype: `dtype`, or f32 for 16-bit inputs on CUDA (autocast hands parameters their gradients
// in f32; writing them so saves a cast launch per weight). The CPU does the same.
FRUGAL_DECLARE_KERNEL(conv2d_backward_weight,
                      (const Context& ctx, DType dtype, DType dw_dtype, const Conv2dShape& s,
                       const void* x, const void* dy, void* dw, void* dbias),
                      (ctx, dtype, dw_dtype, s, x, dy, dw, dbias))

// Note [Batch norm inside the depthwise convolution]
// A convolution whose input is a batch norm's output, x = act((z - mean) * (invstd * gamma) +
// beta) rounded to the dtype, need not have x written at all. In training the batch norm
// computes its statistics and defers writing x (Note [Deferred writes] in core/tensor.h; relu
// and relu6 outputs of a z that backward keeps, nn/functional_norm.cpp); a
// depthwise convolution that reads it asks for z and the statistics instead, and CUDA's depthwise
// kernels compute x in registers as they load z, with the normalize kernel's expression, so the
// products are the same bit for bit. Backward keeps z and the statistics (the storages the batch
// norm keeps anyway) instead of a recipe that would recompute x, and the weight gradient loads z
// the same way. Both passes that read z and wrote x (the forward's normalize, backward's
// recompute) and their x-sized traffic are gone: 26 of MobileNetV1's 53 normalize passes a step.
// cuda::depthwise_fuses_bn_act names the shapes and activations the kernels take; everywhere
// else (the CPU, other shapes) these entries write x into a workspace first and give the same
// result.
struct BnActInput {
  Activation act = Activation::identity;
  const void* mean = nullptr;    // f32 [C]
  const void* invstd = nullptr;  // f32 [C]
  const void* gamma = nullptr;   // f32 [C]; null: 1
  const void* beta = nullptr;    // f32 [C]; null: 0
};
// conv2d_forward of x = act(bn(z)).
FRUGAL_DECLARE_KERNEL(conv2d_forward_bn_act,
                      (const Context& ctx, DType dtype, const Conv2dShape& s, const BnActInput& in,
                       const void* z, const void* w, const void* bias, void* y),
                      (ctx, dtype, s, in, z, w, bias, y))
// conv2d_backward_weight of x = act(bn(z)).
FRUGAL_DECLARE_KERNEL(conv2d_backward_weight_bn_act,
                      (const Context& ctx, DType dtype, DType dw_dtype, const Conv2dShape& s,
                       const BnActInput& in, const void* z, const void* dy, void* dw, void* dbias),
                      (ctx, dtype, dw_dtype, s, in, z, dy, dw, dbias))

}  // namespace frugal::kernels
