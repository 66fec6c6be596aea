// Device-independent kernel plumbing: index descriptors, default contexts and byte copies.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#if defined(FRUGAL_WITH_CUDA)
#include "kernels/cuda/runtime.h"
#endif

namespace frugal::kernels {

Broadcast make_broadcast(const Shape& out, const Shape& a, const Shape& b) {
  FRUGAL_CHECK(out.ndim() <= kMaxDims, "broadcast: rank ", out.ndim(), " of ", out,
               " exceeds the supported ", kMaxDims);
  FRUGAL_CHECK(a.ndim() <= out.ndim() && b.ndim() <= out.ndim(), "broadcast: ", a, " and ", b,
               " do not broadcast to ", out);
  Broadcast bc;
  bc.ndim = static_cast<int>(out.ndim());
  bc.numel = out.numel();
  auto fill_strides = [&](const Shape& s, int64_t* strides) {
    int64_t offset = out.ndim() - s.ndim();
    std::vector<int64_t> st = s.strides();
    for (int64_t i = 0; i < out.ndim(); ++i) {
      if (i < offset) {
        strides[i] = 0;
        continue;
      }
      int64_t d = s[i - offset];
      FRUGAL_CHECK(d == out[i] || d == 1, "broadcast: ", s, " does not broadcast to ", out);
      strides[i] = (d == 1 && out[i] != 1) ? 0 : st[static_cast<size_t>(i - offset)];
    }
  };
  for (int64_t i = 0; i < out.ndim(); ++i) bc.out_dims[i] = out[i];
  fill_strides(a, bc.a_strides);
  fill_strides(b, bc.b_strides);
  return bc;
}

Reduction make_reduction(const Shape& in, const Shape& out) {
  FRUGAL_CHECK(in.ndim() == out.ndim() && in.ndim() <= kMaxDims, "reduction: cannot reduce ", in,
               " to ", out);
  Reduction r;
  r.ndim = static_cast<int>(in.ndim());
  r.in_numel = in.numel();
  r.out_numel = out.numel();
  for (int64_t i = 0; i < in.ndim(); ++i) {
    FRUGAL_CHECK(out[i] == 1 || out[i] == in[i], "reduction: cannot reduce ", in, " to ", out);
    r.in_dims[i] = in[i];
    r.out_dims[i] = out[i];
  }
  return r;
}

namespace {
std::atomic<bool>& conv_tf32_flag() {
  static std::atomic<bool> flag{[] {
    const char* v = std::getenv("FRUGAL_ALLOW_TF32");
    return v == nullptr || std::string(v) != "0";
  }()};
  return flag;
}
}  // namespace

void set_conv_allow_tf32(bool allow) { conv_tf32_flag().store(allow); }
bool conv_allow_tf32() { return conv_tf32_flag().load(); }

std::string Conv2dShape::str() const {
  return detail::str("conv2d(x=[", n, ", ", h, ", ", w, ", ", c, "], out_channels=", k,
                     ", kernel=", kh, "x", kw, ", stride=", stride_h, "x", stride_w,
                     ", padding=", pad_h, "x", pad_w, ", dilation=", dil_h, "x", dil_w,
                     ", groups=", groups, ")");
}

Context Context::of(Device device) {
  Context ctx;
  ctx.device = device;
  ctx.scratch = &memory::allocator_for(device);
#if defined(FRUGAL_WITH_CUDA)
  if (device.is_cuda()) ctx.stream = cuda::compute_stream(device);
#endif
  return ctx;
}

void copy_bytes(const Context& ctx, Device dst_device, void* dst, Device src_device,
                const void* src, size_t bytes) {
  if (bytes == 0) return;
  FRUGAL_CHECK(!dst_device.is_meta() && !src_device.is_meta(),
               "copy: meta tensors have no data to copy");
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(FRUGAL_WITH_CUDA)
  cuda::copy_bytes(ctx, dst_device, dst, src_device, src, bytes);
#else
  (void)ctx;
  FRUGAL_FAIL("copy: frugal was built without CUDA, cannot copy from ", src_device, " to ",
              dst_device);
#endif
}

int cuda_device_count() {
#if defined(FRUGAL_WITH_CUDA)
  return cuda::device_count();
#else
  return 0;
#endif
}

}  // namespace frugal::kernels
