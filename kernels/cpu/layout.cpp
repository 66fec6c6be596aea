// CPU strided copy (kernels/layout.h): an odometer over the outer dimensions and a plain loop
// along the innermost one, split across threads by outer rows.
#include "kernels/layout.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_common.h"

namespace frugal::kernels::cpu {
namespace {

template <typename U>
void copy_typed(const StridedCopy& c, const U* src, U* dst) {
  const int last = c.ndim - 1;
  const int64_t inner = c.dims[last], ss = c.src_strides[last], ds = c.dst_strides[last];
  const int64_t rows = c.numel / inner;
  parallel_for(rows, std::max<int64_t>(1, 32768 / inner), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t so = 0, dof = 0, r = row;
      for (int d = last - 1; d >= 0; --d) {
        int64_t q = r / c.dims[d], idx = r - q * c.dims[d];
        r = q;
        so += idx * c.src_strides[d];
        dof += idx * c.dst_strides[d];
      }
      const U* s = src + so;
      U* o = dst + dof;
      if (ss == 1 && ds == 1) {
        std::memcpy(o, s, static_cast<size_t>(inner) * sizeof(U));
      } else {
        for (int64_t i = 0; i < inner; ++i) o[i * ds] = s[i * ss];
      }
    }
  });
}

}  // namespace

void strided_copy(const Context& ctx, size_t elem_size, const StridedCopy& c, const void* src,
                  void* dst) {
  (void)ctx;
  FRUGAL_CHECK(c.ndim >= 1 && c.ndim <= kMaxDims, "strided_copy: bad rank ", c.ndim);
  if (c.numel == 0) return;
  switch (elem_size) {
    case 1:
      return copy_typed(c, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst));
    case 2:
      return copy_typed(c, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
    case 4:
      return copy_typed(c, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst));
    case 8:
      return copy_typed(c, static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst));
  }
  FRUGAL_FAIL("strided_copy: element size ", elem_size, " is not 1, 2, 4 or 8");
}

}  // namespace frugal::kernels::cpu
