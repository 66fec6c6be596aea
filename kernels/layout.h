// The one copy kernel behind the copying shape ops (narrow, cat, stack, transpose, permute, and
// broadcasting of any dtype): elements are moved by size, never converted.
#pragma once

#include <cstdint>

#include "kernels/elementwise.h"

namespace frugal::kernels {

// dst[sum idx[d] * dst_strides[d]] = src[sum idx[d] * src_strides[d]] for every index idx of
// dims (outermost first). Strides are in elements and may be 0 on the source (broadcast).
struct StridedCopy {
  int ndim = 0;
  int64_t numel = 0;
  int64_t dims[kMaxDims] = {};
  int64_t src_strides[kMaxDims] = {};
  int64_t dst_strides[kMaxDims] = {};
};

// elem_size is 1, 2, 4 or 8 bytes; src and dst do not overlap.
FRUGAL_DECLARE_KERNEL(strided_copy,
                      (const Context& ctx, size_t elem_size, const StridedCopy& c, const void* src,
                       void* dst),
                      (ctx, elem_size, c, src, dst))

}  // namespace frugal::kernels
