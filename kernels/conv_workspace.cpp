// The bounded workspace of CUDA convolutions (Note [Bounded conv workspace]) and the routes of
// kernels/cuda/conv.cu it depends on, in plain C++ so that the meta device can use them.
#include "kernels/conv_workspace.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "kernels/space_to_depth.h"
#include "memory/events.h"

namespace frugal::kernels {
namespace cuda {
namespace {

// Whether frugal's own kernels can index `s` in 32 bits (their Geom, direct_conv_common.cuh):
// the element counts of x and y, and strides, pads and dilations, with room to add two of them.
bool geometry_fits_int32(const Conv2dShape& s) {
  for (int64_t v : {s.n * s.h * s.w * s.c, s.n * s.oh() * s.ow() * s.k, s.stride_h, s.stride_w,
                    s.pad_h, s.pad_w, s.dil_h, s.dil_w}) {
    if (v > INT_MAX / 2) return false;
  }
  return true;
}

}  // namespace

bool depthwise_handles(const Conv2dShape& s) {
  if (!s.depthwise() || s.kh != s.kw || (s.kh != 3 && s.kh != 5)) return false;
  return geometry_fits_int32(s) && s.oh() >= 1 && s.ow() >= 1;  // depthwise: K == C
}

bool depthwise_fuses_activation(Activation act) {
  // SiLU's exponential, taken again at every load of z (about 3.75 times per element in the
  // forward's strips), made EfficientNet-B0's replayed bf16 step 21% slower (6,025 -> 4,737
  // img/s on the H200): its batch norms write x as before.
  return act == Activation::relu || act == Activation::relu6;
}

bool depthwise_fuses_bn_act(const Conv2dShape& s, Activation act) {
  return depthwise_fuses_activation(act) && depthwise_handles(s) && s.dil_w == 1 &&
         (s.stride_w == 1 || s.stride_w == 2) && s.c % 4 == 0;
}

bool pointwise(const Conv2dShape& s) {
  return s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 &&
         s.pad_w == 0 && s.groups == 1 && s.n * s.h * s.w <= INT_MAX;
}

bool few_channel_handles(const Conv2dShape& s) {
  if (s.groups != 1 || s.kh != kFewChannelSize || s.kw != kFewChannelSize || s.c < 1 ||
      s.c > kFewChannelMaxInputs) {
    return false;
  }
  return geometry_fits_int32(s) && s.oh() >= 1 && s.ow() >= 1 && s.k >= 1;
}

bool stem_gemm_handles(DType dtype, const Conv2dShape& s) {
  if (dtype != DType::f32 || !conv_allow_tf32() || s.groups != 1 || s.c < 1 ||
      s.c > kFewChannelMaxInputs || s.kh * s.kw <= kFewChannelSize * kFewChannelSize ||
      s.dil_h != 1 || s.dil_w != 1 || s.n < 1 || s.k < 1 || s.oh() < 1 || s.ow() < 1 ||
      s.stride_w > kStemMaxWindow || s.kh * stem_row_blocks(s.kw) > kStemMaxColumnBlocks ||
      s.kh * stem_window_width(s.stride_w, s.kw) > kStemMaxWindow) {
    return false;
  }
  return geometry_fits_int32(s);  // dilations are 1 here
}

bool space_to_depth_handles(DType dtype, const Conv2dShape& s) {
  // bf16 alone: cuDNN's f16 stem is fast as it is (Note [Stride-2 stems as stride-1 ...])
  if (dtype != DType::bf16 || !space_to_depth_fits(s) || !geometry_fits_int32(s)) {
    return false;
  }
  const Conv2dShape& in = space_to_depth(s).inner;
  return in.n * in.h * in.w * in.c <= INT_MAX / 2;
}

}  // namespace cuda

bool cuda_conv_uses_cudnn(ConvPass pass, DType dtype, const Conv2dShape& s) {
  if (cuda::depthwise_handles(s) || cuda::pointwise(s)) return false;
  // the early returns of kernels/cuda/conv.cu: nothing to compute
  switch (pass) {
    case ConvPass::forward:  // 16-bit 3x3 stems: frugal's kernel (Note [Few-channel forwards])
      return s.n > 0 && s.k > 0 && (dtype == DType::f32 || !cuda::few_channel_handles(s));
    case ConvPass::backward_input:
      return s.n > 0 && s.c > 0;
    case ConvPass::backward_weight:
      // f32 3x3 stems stay on cuDNN, whose kernel is fast there (kernels/cuda/conv.cu)
      return s.n > 0 && s.k > 0 && (dtype == DType::f32 || !cuda::few_channel_handles(s)) &&
             !cuda::stem_gemm_handles(dtype, s);
  }
  return false;
}

bool cuda_conv_takes_workspace(ConvPass pass, DType dtype, const Conv2dShape& s) {
  return cuda_conv_uses_cudnn(pass, dtype, s) ||
         (pass == ConvPass::backward_weight && cuda::stem_gemm_handles(dtype, s));
}

double conv_workspace_scale() {
  static const double scale = [] {
    const char* v = std::getenv("FRUGAL_CONV_WORKSPACE_SCALE");
    if (v == nullptr || *v == '\0') return 1.0;
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    FRUGAL_CHECK(end != v && *end == '\0' && s > 0, "FRUGAL_CONV_WORKSPACE_SCALE: expected a ",
                 "positive number, got '", v, "'");
    return s;
  }();
  return scale;
}

namespace {

size_t bound_floor(ConvPass pass) {
  return pass == ConvPass::backward_weight ? size_t{16} << 20 : size_t{4} << 20;
}

}  // namespace

size_t space_to_depth_inner_bound(ConvPass pass, DType dtype, const Conv2dShape& s) {
  const size_t own = cuda_conv_workspace_bytes(pass, dtype, space_to_depth(s).inner);
  const size_t rewritten =
      space_to_depth_input_bytes(dtype, s) + space_to_depth_weight_bytes(dtype, s);
  const size_t room = rewritten < kConvWorkspaceCap ? kConvWorkspaceCap - rewritten : 0;
  return std::min(own, std::max(room, bound_floor(pass)));
}

size_t cuda_conv_workspace_bytes(ConvPass pass, DType dtype, const Conv2dShape& s) {
  if (!cuda_conv_takes_workspace(pass, dtype, s)) return 0;
  const size_t esize = dtype_size(dtype);
  if (pass != ConvPass::backward_input && cuda::space_to_depth_handles(dtype, s)) {
    return space_to_depth_input_bytes(dtype, s) + space_to_depth_weight_bytes(dtype, s) +
           space_to_depth_inner_bound(pass, dtype, s);
  }
  const size_t input = static_cast<size_t>(s.n * s.h * s.w * s.c) * esize;
  const size_t output = static_cast<size_t>(s.n * s.oh() * s.ow() * s.k) * esize;
  // Fractions of the larger tensor, per pass: Note [Bounded conv workspace] has the measurements.
  const double fraction = pass == ConvPass::forward          ? 1.6
                          : pass == ConvPass::backward_input ? 0.25
                                                             : 0.3;
  const size_t floor = bound_floor(pass);
  size_t bound = std::max(floor, static_cast<size_t>(fraction * conv_workspace_scale() *
                                                     static_cast<double>(std::max(input, output))));
  if (pass == ConvPass::backward_weight) {
    const size_t weights = static_cast<size_t>(s.k * s.kh * s.kw * s.cin_per_group());
    bound = std::max(bound, 2 * weights * sizeof(float));
    // 16-bit tensor-core weight gradients want input channels in multiples of 8: cuDNN copies
    // the input, padded, into the workspace (PyTorch's bf16 ResNet-18 stem runs
    // nhwcAddPaddingKernel before its implicit GEMM). Without room for that copy frugal's bf16
    // stem fell to wgrad_alg0_engine, 3.1 of an 11.2 ms step (H200, batch 128, 224x224).
    constexpr int64_t kAlign = cuda::kTensorCoreChannels;
    if (dtype != DType::f32 && s.cin_per_group() % kAlign != 0) {
      const int64_t padded = (s.cin_per_group() + kAlign - 1) / kAlign * kAlign * s.groups;
      bound += static_cast<size_t>(s.n * s.h * s.w * padded) * esize;
    }
  }
  return std::min(bound, kConvWorkspaceCap);
}

namespace {
thread_local bool t_meta_predicts_cuda = false;
}  // namespace

MetaPredictsCuda::MetaPredictsCuda(bool on) : set_(t_meta_predicts_cuda, on) {}
bool meta_predicts_cuda() { return t_meta_predicts_cuda; }

void meta_conv_workspace(const Context& ctx, ConvPass pass, DType dtype, const Conv2dShape& s) {
  if (!ctx.device.is_meta() || !t_meta_predicts_cuda) return;
  const size_t bytes = cuda_conv_workspace_bytes(pass, dtype, s);
  if (bytes == 0) return;
  // allocated and released at once, as the CUDA kernel's workspace lives for its call only
  memory::DataPtr ws = ctx.workspace(bytes, memory::Category::conv_workspace);
}

}  // namespace frugal::kernels
