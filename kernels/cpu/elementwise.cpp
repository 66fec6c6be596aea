// CPU elementwise kernels: broadcasting binary ops, the affine scalar op and fills.
// Operands may be the output itself (in-place, same index); partial overlaps are not allowed.
// Binary ops collapse the broadcast into [rows, inner] with the inner strides 0 or 1, so the
// common cases (same shape, per-channel [C], per-sample [N, 1, 1, C]) run as plain vector loops.
// f16 and bf16 operands are widened a block at a time into f32 on the stack, computed, and
// narrowed into the output (Note [CPU dtypes]).
#include "kernels/elementwise.h"

#include <cstring>

#include "base/half.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/widen.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 32768;  // elements below which a loop stays on one thread

template <BinaryOp op, typename T>
inline T apply(T a, T b) {
  if constexpr (op == BinaryOp::add) return a + b;
  if constexpr (op == BinaryOp::sub) return a - b;
  if constexpr (op == BinaryOp::mul) return a * b;
  if constexpr (op == BinaryOp::div) return a / b;
}

// out[i] = a[i * sa] op b[i * sb] for i < n; the 0/1 stride cases are separate loops so the
// compiler vectorises them (a scalar operand is hoisted out of the loop).
template <BinaryOp op, typename T>
void binary_row(T* __restrict out, const T* __restrict a, int64_t sa, const T* __restrict b,
                int64_t sb, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = apply<op>(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = b[0];
    for (int64_t i = 0; i < n; ++i) out[i] = apply<op>(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = a[0];
    for (int64_t i = 0; i < n; ++i) out[i] = apply<op>(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = apply<op>(a[i * sa], b[i * sb]);
  }
}

// binary_row for storage S: f32/f64 directly, 16-bit through f32 blocks of kBlock elements.
template <BinaryOp op, typename S>
void binary_row_stored(S* out, const S* a, int64_t sa, const S* b, int64_t sb, int64_t n) {
  if constexpr (!is_narrow_v<S>) {
    binary_row<op>(out, a, sa, b, sb, n);
  } else {
    constexpr int64_t kBlock = 256;
    float fa[kBlock], fb[kBlock], fo[kBlock];
    // one block of a strided operand in f32: contiguous runs widen at once
    auto load = [](const S* p, int64_t stride, int64_t i0, int64_t m, float* dst) -> int64_t {
      if (stride == 0) {
        dst[0] = Num<S>::load(p[0]);
      } else if (stride == 1) {
        widen(p + i0, m, dst);
      } else {
        for (int64_t j = 0; j < m; ++j) dst[j] = Num<S>::load(p[(i0 + j) * stride]);
      }
      return stride == 0 ? 0 : 1;
    };
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t m = std::min(kBlock, n - i0);
      const int64_t ja = load(a, sa, i0, m, fa), jb = load(b, sb, i0, m, fb);
      binary_row<op>(fo, fa, ja, fb, jb, m);
      narrow(fo, m, out + i0);
    }
  }
}

// The broadcast with size-1 dimensions dropped and neighbours merged wherever both operands
// walk them as one (stride[i] == stride[i+1] * dim[i+1]); dims[ndim-1] is the inner row.
struct Collapsed {
  int ndim = 0;
  int64_t dims[kMaxDims] = {};
  int64_t sa[kMaxDims] = {};
  int64_t sb[kMaxDims] = {};
};

Collapsed collapse(const Broadcast& bc) {
  Collapsed c;
  for (int i = 0; i < bc.ndim; ++i) {
    if (bc.out_dims[i] == 1) continue;
    if (c.ndim > 0) {
      int j = c.ndim - 1;
      if (c.sa[j] == bc.a_strides[i] * bc.out_dims[i] &&
          c.sb[j] == bc.b_strides[i] * bc.out_dims[i]) {
        c.dims[j] *= bc.out_dims[i];
        c.sa[j] = bc.a_strides[i];
        c.sb[j] = bc.b_strides[i];
        continue;
      }
    }
    c.dims[c.ndim] = bc.out_dims[i];
    c.sa[c.ndim] = bc.a_strides[i];
    c.sb[c.ndim] = bc.b_strides[i];
    ++c.ndim;
  }
  if (c.ndim == 0) {  // a single element
    c.ndim = 1;
    c.dims[0] = 1;
  }
  return c;
}

template <BinaryOp op, typename T>
void binary_impl(const Broadcast& bc, const T* a, const T* b, T* out) {
  // T is the storage type here (float, double, f16_t, bf16_t)
  const Collapsed c = collapse(bc);
  const int last = c.ndim - 1;
  const int64_t inner = c.dims[last];
  const int64_t rows = bc.numel / inner;
  const int64_t isa = c.sa[last], isb = c.sb[last];
  if (rows == 1) {  // one long row: split it across threads
    parallel_for(inner, kGrain, [&](int64_t begin, int64_t end) {
      binary_row_stored<op>(out + begin, a + begin * isa, isa, b + begin * isb, isb, end - begin);
    });
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kGrain / inner);
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    // Odometer over the outer dimensions, started at row `begin`.
    int64_t idx[kMaxDims] = {};
    int64_t oa = 0, ob = 0, r = begin;
    for (int d = last - 1; d >= 0; --d) {
      idx[d] = r % c.dims[d];
      r /= c.dims[d];
      oa += idx[d] * c.sa[d];
      ob += idx[d] * c.sb[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      binary_row_stored<op>(out + row * inner, a + oa, isa, b + ob, isb, inner);
      for (int d = last - 1; d >= 0; --d) {
        oa += c.sa[d];
        ob += c.sb[d];
        if (++idx[d] < c.dims[d]) break;
        oa -= c.sa[d] * c.dims[d];
        ob -= c.sb[d] * c.dims[d];
        idx[d] = 0;
      }
    }
  });
}

template <typename T>
void binary_dispatch(BinaryOp op, const Broadcast& bc, const void* a, const void* b, void* out) {
  auto* pa = static_cast<const T*>(a);
  auto* pb = static_cast<const T*>(b);
  auto* po = static_cast<T*>(out);
  switch (op) {
    case BinaryOp::add:
      return binary_impl<BinaryOp::add>(bc, pa, pb, po);
    case BinaryOp::sub:
      return binary_impl<BinaryOp::sub>(bc, pa, pb, po);
    case BinaryOp::mul:
      return binary_impl<BinaryOp::mul>(bc, pa, pb, po);
    case BinaryOp::div:
      return binary_impl<BinaryOp::div>(bc, pa, pb, po);
  }
  FRUGAL_FAIL("binary: unknown op ", static_cast<int>(op));
}

// y = alpha * x + beta in the compute type; 16-bit through f32 blocks on the stack.
template <typename S>
void affine_stored(int64_t n, const S* x, double alpha, double beta, S* y) {
  using T = typename Num<S>::C;
  const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (is_narrow_v<S>) {
      constexpr int64_t kBlock = 256;
      float buf[kBlock];
      for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
        const int64_t m = std::min(kBlock, end - i0);
        widen(x + i0, m, buf);
        for (int64_t j = 0; j < m; ++j) buf[j] = al * buf[j] + be;
        narrow(buf, m, y + i0);
      }
    } else {
      for (int64_t i = begin; i < end; ++i) y[i] = al * x[i] + be;
    }
  });
}

template <typename T>
void fill_typed(int64_t n, void* y, T v) {
  T* p = static_cast<T*>(y);
  parallel_for(n, 4 * kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) p[i] = v;
  });
}

}  // namespace

void binary(const Context& ctx, BinaryOp op, DType dtype, const Broadcast& bc, const void* a,
            const void* b, void* out) {
  (void)ctx;
  FRUGAL_CHECK(bc.ndim >= 0 && bc.ndim <= kMaxDims, "binary: bad broadcast rank ", bc.ndim);
  if (bc.numel == 0) return;
  FRUGAL_CPU_ANY_FLOAT_SWITCH(dtype, "binary", binary_dispatch<S>(op, bc, a, b, out));
}

void affine(const Context& ctx, DType dtype, int64_t n, const void* x, double alpha, double beta,
            void* y) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "affine: negative size ", n);
  FRUGAL_CPU_ANY_FLOAT_SWITCH(
      dtype, "affine",
      affine_stored<S>(n, static_cast<const S*>(x), alpha, beta, static_cast<S*>(y)));
}

void add_i64(const Context& ctx, int64_t n, int64_t* y, int64_t delta) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "add_i64: negative size ", n);
  for (int64_t i = 0; i < n; ++i) y[i] += delta;  // counters: a handful of elements
}

void fill(const Context& ctx, DType dtype, int64_t n, void* y, double value) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "fill: negative size ", n);
  switch (dtype) {
    case DType::f32:
      return fill_typed<float>(n, y, static_cast<float>(value));
    case DType::f64:
      return fill_typed<double>(n, y, value);
    case DType::f16:
      return fill_typed<uint16_t>(n, y, float_to_f16(static_cast<float>(value)));
    case DType::bf16:
      return fill_typed<uint16_t>(n, y, float_to_bf16(static_cast<float>(value)));
    case DType::i64:
      return fill_typed<int64_t>(n, y, static_cast<int64_t>(value));
    case DType::u8:
      return fill_typed<uint8_t>(n, y, static_cast<uint8_t>(value));
  }
  FRUGAL_FAIL("fill: unknown dtype ", static_cast<int>(dtype));
}

}  // namespace frugal::kernels::cpu
