// Note [Stride-2 stems as stride-1 convolutions] (kernels/space_to_depth.h).
#include "kernels/space_to_depth.h"

#include "base/error.h"

namespace frugal::kernels {
namespace {

int64_t floor_half64(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

bool space_to_depth_fits(const Conv2dShape& s) {
  return s.stride_h == 2 && s.stride_w == 2 && s.dil_h == 1 && s.dil_w == 1 && s.groups == 1 &&
         s.c >= 1 && s.c <= 4 && s.kh * s.kw > 9 && s.n >= 1 && s.k >= 1 && s.oh() >= 1 &&
         s.ow() >= 1;
}

SpaceToDepth space_to_depth(const Conv2dShape& s) {
  FRUGAL_CHECK(space_to_depth_fits(s), "space_to_depth: ", s.str(),
               " is not a stride-2 stem of 1-4 channels larger than 3x3");
  SpaceToDepth r;
  r.row_first = floor_half64(-s.pad_h);
  r.col_first = floor_half64(-s.pad_w);
  const int64_t row_taps = floor_half64(s.kh - 1 - s.pad_h) - r.row_first + 1;
  const int64_t col_taps = floor_half64(s.kw - 1 - s.pad_w) - r.col_first + 1;
  Conv2dShape& in = r.inner;
  in.n = s.n;
  in.h = s.oh() + row_taps - 1;
  in.w = s.ow() + col_taps - 1;
  in.c = (4 * s.c + 7) / 8 * 8;
  in.k = s.k;
  in.kh = row_taps;
  in.kw = col_taps;
  return r;  // stride 1, no padding, no dilation, one group: Conv2dShape's defaults
}

size_t space_to_depth_input_bytes(DType dtype, const Conv2dShape& s) {
  const Conv2dShape& in = space_to_depth(s).inner;
  return round_up_256(static_cast<size_t>(in.n * in.h * in.w * in.c) * dtype_size(dtype));
}

size_t space_to_depth_weight_bytes(DType dtype, const Conv2dShape& s) {
  const Conv2dShape& in = space_to_depth(s).inner;
  return round_up_256(static_cast<size_t>(in.k * in.kh * in.kw * in.c) * dtype_size(dtype));
}

}  // namespace frugal::kernels
