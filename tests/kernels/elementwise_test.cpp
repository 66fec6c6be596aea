// Elementwise kernels against double-precision reference loops: broadcasting binary ops over
// the shapes the network produces, the affine op and fills.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/half.h"
#include "base/shape.h"
#include "kernels/kernel_test_util.h"

using namespace frugal;
using namespace frugal::test;

namespace {

double ref_op(kernels::BinaryOp op, double a, double b) {
  switch (op) {
    case kernels::BinaryOp::add:
      return a + b;
    case kernels::BinaryOp::sub:
      return a - b;
    case kernels::BinaryOp::mul:
      return a * b;
    case kernels::BinaryOp::div:
      return a / b;
  }
  return 0;
}

// Flat index into `s` (right-aligned to `out`) of the output element with coordinates idx.
int64_t source_index(const Shape& s, const Shape& out, const std::vector<int64_t>& idx) {
  int64_t offset = out.ndim() - s.ndim(), flat = 0;
  for (int64_t d = 0; d < s.ndim(); ++d) {
    flat = flat * s[d] + (s[d] == 1 ? 0 : idx[static_cast<size_t>(d + offset)]);
  }
  return flat;
}

void check_binary(const Shape& sa, const Shape& sb) {
  const Shape out = broadcast_shapes(sa, sb, "test");
  const auto va = random_values(sa.numel(), 11);
  auto vb = random_values(sb.numel(), 12, 0.5, 3.0);  // away from zero for div
  for (size_t i = 0; i < vb.size(); i += 2) vb[i] = -vb[i];
  const kernels::Broadcast bc = kernels::make_broadcast(out, sa, sb);
  for (DType dt : kFloatTypes) {
    for (auto op : {kernels::BinaryOp::add, kernels::BinaryOp::sub, kernels::BinaryOp::mul,
                    kernels::BinaryOp::div}) {
      Buf a(dt, va), b(dt, vb), y(dt, out.numel());
      kernels::binary(cpu_ctx(), op, dt, bc, a.data(), b.data(), y.data());
      std::vector<double> want(static_cast<size_t>(out.numel()));
      std::vector<int64_t> idx(out.size(), 0);
      for (int64_t i = 0; i < out.numel(); ++i) {
        int64_t r = i;
        for (int64_t d = out.ndim() - 1; d >= 0; --d) {
          idx[static_cast<size_t>(d)] = r % out[d];
          r /= out[d];
        }
        want[static_cast<size_t>(i)] =
            ref_op(op, a.get(source_index(sa, out, idx)), b.get(source_index(sb, out, idx)));
      }
      expect_near_all(y.values(), want, tolerance(dt),
                      detail::str(sa, " op", static_cast<int>(op), " ", sb, " ", dt));
    }
  }
}

}  // namespace

TEST(Binary, SameShape) {
  check_binary(Shape{3, 5, 7}, Shape{3, 5, 7});
  check_binary(Shape{4, 33, 35, 17}, Shape{4, 33, 35, 17});  // large: threaded
}

TEST(Binary, PerChannel) {
  check_binary(Shape{2, 3, 4, 5}, Shape{5});
  check_binary(Shape{5}, Shape{2, 3, 4, 5});
  check_binary(Shape{4, 33, 35, 17}, Shape{17});
  check_binary(Shape{4, 33, 35, 17}, Shape{1, 1, 1, 17});
}

TEST(Binary, PerSample) {
  check_binary(Shape{2, 1, 1, 5}, Shape{2, 3, 4, 5});  // squeeze-excite scale
  check_binary(Shape{3, 9, 11, 7}, Shape{3, 1, 1, 7});
  check_binary(Shape{3, 9, 11, 7}, Shape{3, 1, 1, 1});
  check_binary(Shape{4, 33, 35, 17}, Shape{4, 1, 1, 17});
}

TEST(Binary, MixedAndScalar) {
  check_binary(Shape{3, 1}, Shape{1, 4});
  check_binary(Shape{6, 1, 5, 1, 3}, Shape{4, 1, 2, 1});
  check_binary(Shape{1}, Shape{7, 3});
  check_binary(Shape{}, Shape{2, 3});
  check_binary(Shape{}, Shape{});
  check_binary(Shape{1, 1}, Shape{50001});  // one long row with a scalar: threaded
  check_binary(Shape{2, 1, 3}, Shape{2, 5, 3});
}

TEST(Binary, EmptyAndErrors) {
  Shape s{0, 3};
  auto bc = kernels::make_broadcast(s, s, Shape{3});
  kernels::binary(cpu_ctx(), kernels::BinaryOp::add, DType::f32, bc, nullptr, nullptr, nullptr);
  Buf a(DType::f32, 4), b(DType::f32, 4), y(DType::f32, 4);
  auto bc4 = kernels::make_broadcast(Shape{4}, Shape{4}, Shape{4});
  EXPECT_THROW(kernels::binary(cpu_ctx(), kernels::BinaryOp::add, DType::i64, bc4, a.data(),
                               b.data(), y.data()),
               Error);
  EXPECT_THROW(kernels::make_broadcast(Shape{4, 3}, Shape{4, 3}, Shape{2}), Error);
}

TEST(Affine, MatchesReference) {
  for (DType dt : kFloatTypes) {
    for (int64_t n : {0, 1, 7, 100003}) {
      auto v = random_values(n, 3);
      Buf x(dt, v), y(dt, n);
      kernels::affine(cpu_ctx(), dt, n, x.data(), -1.75, 0.3, y.data());
      std::vector<double> want(v.size());
      for (size_t i = 0; i < v.size(); ++i) want[i] = -1.75 * x.get(static_cast<int64_t>(i)) + 0.3;
      expect_near_all(y.values(), want, tolerance(dt, 2), detail::str("affine ", dt, " n=", n));
    }
  }
}

TEST(Fill, EveryDType) {
  const int64_t n = 1037;
  std::vector<uint8_t> raw(static_cast<size_t>(n) * 8, 0xAB);
  auto ctx = cpu_ctx();
  kernels::fill(ctx, DType::f32, n, raw.data(), -2.5);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(reinterpret_cast<float*>(raw.data())[i], -2.5f);
  kernels::fill(ctx, DType::f64, n, raw.data(), 0.1);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(reinterpret_cast<double*>(raw.data())[i], 0.1);
  kernels::fill(ctx, DType::f16, n, raw.data(), 0.1);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(reinterpret_cast<uint16_t*>(raw.data())[i], float_to_f16(0.1f));
  }
  kernels::fill(ctx, DType::bf16, n, raw.data(), -3.0);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bf16_to_float(reinterpret_cast<uint16_t*>(raw.data())[i]), -3.0f);
  }
  kernels::fill(ctx, DType::i64, n, raw.data(), -7);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(reinterpret_cast<int64_t*>(raw.data())[i], -7);
  std::memset(raw.data(), 0, raw.size());
  kernels::fill(ctx, DType::u8, n, raw.data(), 1);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(raw[static_cast<size_t>(i)], 1);
  EXPECT_EQ(raw[static_cast<size_t>(n)], 0);  // nothing written past n
  kernels::fill(ctx, DType::f32, 0, nullptr, 1.0);
}

TEST(AddI64, AddsToEveryCounterAndNothingPast) {
  std::vector<int64_t> v{0, 7, -3, (int64_t{1} << 40), 99};
  kernels::add_i64(cpu_ctx(), 4, v.data(), 5);
  EXPECT_EQ(v, (std::vector<int64_t>{5, 12, 2, (int64_t{1} << 40) + 5, 99}));
  kernels::add_i64(cpu_ctx(), 0, nullptr, 1);
  EXPECT_THROW(kernels::add_i64(cpu_ctx(), -1, v.data(), 1), Error);
}

// The dispatcher computes nothing on the meta device (no data there): not even the checks a CPU
// kernel makes of its arguments, which a meta dry run has made already or cannot make.
TEST(Dispatcher, MetaComputesNothing) {
  const auto meta = kernels::Context::of(Device::meta());
  std::vector<int64_t> v{1, 2};
  kernels::add_i64(meta, 2, v.data(), 5);
  EXPECT_EQ(v, (std::vector<int64_t>{1, 2}));
  EXPECT_NO_THROW(kernels::add_i64(meta, -1, nullptr, 1));  // the CPU kernel would throw
  EXPECT_NO_THROW(kernels::fill(meta, DType::f32, 1 << 20, nullptr, 1.0));
}
