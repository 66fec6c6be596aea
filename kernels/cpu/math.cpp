// CPU kernels of kernels/math.h: unary functions and their derivatives, maximum/minimum/pow and
// comparisons with broadcasting, where. Every floating dtype, 16-bit loaded per element.
#include "kernels/math.h"

#include <cstring>

#include "kernels/cpu/typed.h"
#include "kernels/math_fns.h"

namespace frugal::kernels::cpu {
namespace {

constexpr int64_t kGrain = 16384;

template <typename S>
void unary_typed(UnaryOp op, int64_t n, const S* x, double p0, double p1, S* y) {
  using C = typename Num<S>::C;
  const C q0 = static_cast<C>(p0), q1 = static_cast<C>(p1);
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      y[i] = Num<S>::store(math_fns::unary(op, Num<S>::load(x[i]), q0, q1));
    }
  });
}

template <typename S>
void unary_backward_typed(UnaryOp op, int64_t n, const S* s, const S* dy, double p0, double p1,
                          S* dx) {
  using C = typename Num<S>::C;
  const C q0 = static_cast<C>(p0), q1 = static_cast<C>(p1);
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      C g = Num<S>::load(dy[i]) * math_fns::unary_grad(op, Num<S>::load(s[i]), q0, q1);
      dx[i] = Num<S>::store(g);
    }
  });
}

template <typename S>
void binary_typed(MathOp op, const Broadcast& bc, const S* a, const S* b, void* out) {
  using C = typename Num<S>::C;
  const bool cmp = is_comparison(op);
  parallel_for(bc.numel, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t ia, ib;
      broadcast_offsets(bc, i, ia, ib);
      C r = math_fns::binary(op, Num<S>::load(a[ia]), Num<S>::load(b[ib]));
      if (cmp) {
        static_cast<uint8_t*>(out)[i] = r != C(0) ? 1 : 0;
      } else {
        static_cast<S*>(out)[i] = Num<S>::store(r);
      }
    }
  });
}

template <typename I>
void compare_ints_typed(MathOp op, const Broadcast& bc, const I* a, const I* b, uint8_t* out) {
  parallel_for(bc.numel, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t ia, ib;
      broadcast_offsets(bc, i, ia, ib);
      out[i] = math_fns::compare_ints(op, a[ia], b[ib]) ? 1 : 0;
    }
  });
}

template <typename S>
void binary_backward_typed(MathOp op, const Broadcast& bc, const S* a, const S* b, const S* dy,
                           S* ga, S* gb) {
  using C = typename Num<S>::C;
  parallel_for(bc.numel, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t ia, ib;
      broadcast_offsets(bc, i, ia, ib);
      C da, db, g = Num<S>::load(dy[i]);
      math_fns::binary_grad(op, Num<S>::load(a[ia]), Num<S>::load(b[ib]), da, db);
      if (ga != nullptr) ga[i] = Num<S>::store(g * da);
      if (gb != nullptr) gb[i] = Num<S>::store(g * db);
    }
  });
}

template <typename U>
void where_typed(int64_t n, const uint8_t* cond, const U* a, const U* b, U* out) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const U* src = cond[i] ? a : b;
      out[i] = src != nullptr ? src[i] : U(0);
    }
  });
}

}  // namespace

void unary(const Context& ctx, UnaryOp op, DType dtype, int64_t n, const void* x, double p0,
           double p1, void* y) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "unary: negative size ", n);
  FRUGAL_CPU_ANY_FLOAT_SWITCH(
      dtype, "unary", unary_typed<S>(op, n, static_cast<const S*>(x), p0, p1, static_cast<S*>(y)));
}

void unary_backward(const Context& ctx, UnaryOp op, DType dtype, int64_t n, const void* s,
                    const void* dy, double p0, double p1, void* dx) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "unary_backward: negative size ", n);
  FRUGAL_CPU_ANY_FLOAT_SWITCH(
      dtype, "unary_backward",
      unary_backward_typed<S>(op, n, static_cast<const S*>(s), static_cast<const S*>(dy), p0, p1,
                              static_cast<S*>(dx)));
}

void binary_math(const Context& ctx, MathOp op, DType dtype, const Broadcast& bc, const void* a,
                 const void* b, void* out) {
  (void)ctx;
  if (dtype == DType::i64 || dtype == DType::u8) {
    FRUGAL_CHECK(is_comparison(op), "binary_math: ", dtype, " operands are only compared");
    if (dtype == DType::i64) {
      return compare_ints_typed(op, bc, static_cast<const int64_t*>(a),
                                static_cast<const int64_t*>(b), static_cast<uint8_t*>(out));
    }
    return compare_ints_typed(op, bc, static_cast<const uint8_t*>(a),
                              static_cast<const uint8_t*>(b), static_cast<uint8_t*>(out));
  }
  FRUGAL_CPU_ANY_FLOAT_SWITCH(
      dtype, "binary_math",
      binary_typed<S>(op, bc, static_cast<const S*>(a), static_cast<const S*>(b), out));
}

void binary_math_backward(const Context& ctx, MathOp op, DType dtype, const Broadcast& bc,
                          const void* a, const void* b, const void* dy, void* ga, void* gb) {
  (void)ctx;
  FRUGAL_CHECK(!is_comparison(op), "binary_math_backward: comparisons have no gradient");
  FRUGAL_CPU_ANY_FLOAT_SWITCH(
      dtype, "binary_math_backward",
      binary_backward_typed<S>(op, bc, static_cast<const S*>(a), static_cast<const S*>(b),
                               static_cast<const S*>(dy), static_cast<S*>(ga),
                               static_cast<S*>(gb)));
}

void where(const Context& ctx, size_t elem_size, int64_t n, const uint8_t* cond, const void* a,
           const void* b, void* out) {
  (void)ctx;
  FRUGAL_CHECK(n >= 0, "where: negative size ", n);
  switch (elem_size) {
    case 1:
      return where_typed(n, cond, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
                         static_cast<uint8_t*>(out));
    case 2:
      return where_typed(n, cond, static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b),
                         static_cast<uint16_t*>(out));
    case 4:
      return where_typed(n, cond, static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b),
                         static_cast<uint32_t*>(out));
    case 8:
      return where_typed(n, cond, static_cast<const uint64_t*>(a), static_cast<const uint64_t*>(b),
                         static_cast<uint64_t*>(out));
  }
  FRUGAL_FAIL("where: element size ", elem_size, " is not 1, 2, 4 or 8");
}

}  // namespace frugal::kernels::cpu
