// Tensors: factories, copies and views, dtype casts, printing and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error_of.h"
#include "core/factory.h"
#include "core/ops.h"

using namespace frugal;
using frugal::test::error_of;

TEST(Tensor, FactoriesFillAndShape) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::f32);
  for (double v : z.to_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(full({2}, 2.5, {.dtype = DType::bf16}).to_vector(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(arange(4, {.dtype = DType::i64}).to_vector(), (std::vector<double>{0, 1, 2, 3}));
  float raw[3] = {1.5f, -2.0f, 3.25f};
  Tensor b = from_blob(raw, Shape{3}, DType::f32);
  raw[0] = 100.f;  // from_blob copies
  EXPECT_EQ(b.to_vector(), (std::vector<double>{1.5, -2.0, 3.25}));
  EXPECT_DOUBLE_EQ(full({}, 4.0).item(), 4.0);
}

TEST(Tensor, SeededRandomIsReproducibleAndWellDistributed) {
  Generator g1(7), g2(7);
  Tensor a = randn({1000}, g1), b = randn({1000}, g2);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  Tensor c = randn({1000}, g1);  // the generator advanced: new values
  EXPECT_NE(a.to_vector(), c.to_vector());
  std::vector<double> v = a.to_vector();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= v.size();
  for (double x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / v.size());
  EXPECT_NEAR(m, 0.0, 0.1);
  EXPECT_NEAR(s, 1.0, 0.1);
  for (double x : rand({500}, g1, {}, 2.0, 3.0).to_vector()) {
    EXPECT_GE(x, 2.0);
    EXPECT_LT(x, 3.0);
  }
}

TEST(Tensor, ReshapeSharesStorageCloneDoesNot) {
  Tensor a = arange(6);
  Tensor r = a.reshape(Shape{2, -1});
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.data_ptr(), a.data_ptr());
  Tensor c = a.clone();
  EXPECT_NE(c.data_ptr(), a.data_ptr());
  fill_(a, 1.0);
  EXPECT_EQ(r.to_vector()[5], 1.0);
  EXPECT_EQ(c.to_vector()[5], 5.0);
  EXPECT_NE(error_of([&] {
              a.reshape(Shape{4, 2});
            }).find("reshape: cannot reshape [6]"),
            std::string::npos);
}

TEST(Tensor, CastsRoundToTheTargetType) {
  Tensor a = from_vector({1.0, 1.0009765625, 3.14159}, Shape{3});
  EXPECT_EQ(a.to(DType::f16).dtype(), DType::f16);
  EXPECT_EQ(a.to(DType::f16).to_vector()[1], 1.0009765625);  // representable in f16
  EXPECT_EQ(a.to(DType::bf16).to_vector()[1], 1.0);          // not in bf16
  EXPECT_NEAR(a.to(DType::bf16).to_vector()[2], 3.140625, 1e-9);
  EXPECT_EQ(a.to(DType::f64).to(DType::f32).to_vector(), a.to_vector());
}

TEST(Tensor, HalfTensorsComputeOnTheCpu) {
  Tensor a = full({4}, 1.5, {.dtype = DType::f16}), b = full({4}, 0.25, {.dtype = DType::f16});
  Tensor c = add(a, b);
  EXPECT_EQ(c.dtype(), DType::f16);
  EXPECT_EQ(c.to_vector()[0], 1.75);
  EXPECT_EQ(add(a, full({4}, 1.0)).dtype(), DType::f32);  // promote
}

// PyTorch's result type: a 0-d tensor does not widen one with dims (bf16 activations times an f32
// scalar stay bf16, not twice the memory), in ops, comparisons and where; two 0-d tensors, or two
// with dims, take the widest. The scalar's gradient comes back in its own dtype.
TEST(Tensor, AZeroDimTensorDoesNotWidenOneWithDims) {
  Tensor x = full({3}, 1.5, {.dtype = DType::bf16, .requires_grad = true});
  Tensor s = full({}, 2.0, {.requires_grad = true});
  Tensor y = mul(x, s);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.to_vector(), (std::vector<double>{3, 3, 3}));
  EXPECT_EQ(add(s, full({2}, 1.0, {.dtype = DType::f16})).dtype(), DType::f16);
  EXPECT_EQ(add(s, full({}, 1.0, {.dtype = DType::f16})).dtype(), DType::f32);
  EXPECT_EQ(maximum(x, full({}, 2.0, {.dtype = DType::f64})).dtype(), DType::bf16);
  EXPECT_EQ(where(gt(x, 0.0), x, full({}, 0.0)).dtype(), DType::bf16);
  sum(y).backward();
  EXPECT_EQ(s.grad().dtype(), DType::f32);
  EXPECT_EQ(s.grad().to_vector(), (std::vector<double>{4.5}));
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
}

TEST(Tensor, PrintingShowsValuesShapeDtypeDevice) {
  std::string s = from_vector({1, 2}, Shape{2}).str();
  EXPECT_NE(s.find("[1, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=f32"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cpu"), std::string::npos) << s;
}

TEST(Tensor, MismatchErrorsNameTheOpAndShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4, 3});
  EXPECT_NE(error_of([&] { add(a, b); }).find("add: shapes [2, 3] and [4, 3] cannot be broadcast"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              matmul(a, zeros({2, 2}));
            }).find("matmul: inner dimensions differ"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              matmul(a, zeros({3, 2}, {.dtype = DType::f64}));
            }).find("matmul: dtypes differ: [2, 3] f32 cpu and [3, 2] f64 cpu"),
            std::string::npos);
  Tensor m = zeros({2, 3}, {.device = Device::meta()});
  EXPECT_NE(error_of([&] {
              add(a, m);
            }).find("add: expected all tensors on one device, got cpu and meta"),
            std::string::npos);
  EXPECT_NE(error_of([&] { zeros({2}).item(); }).find("item: tensor [2] f32 cpu has 2 elements"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              zeros({2}, {.dtype = DType::i64}).requires_grad_();
            }).find("only floating tensors"),
            std::string::npos);
}

// An empty extent against 1 broadcasts to 0, as in NumPy and PyTorch: the CPU used to refuse
// an empty batch's bias add, and the meta device to plan it as one row.
TEST(Tensor, AnEmptyExtentBroadcastsToEmpty) {
  EXPECT_EQ(add(zeros({0, 3}), ones({3})).shape(), Shape({0, 3}));
  EXPECT_EQ(add(ones({1, 3}), zeros({0, 1})).shape(), Shape({0, 3}));
  EXPECT_EQ(
      add(zeros({0, 3}, {.device = Device::meta()}), ones({3}, {.device = Device::meta()})).shape(),
      Shape({0, 3}));
  EXPECT_EQ(broadcast_shapes(Shape{0}, Shape{1}, "t"), Shape({0}));
  EXPECT_THROW(add(zeros({0, 3}), ones({2, 3})), Error);
}

// Sizes that do not describe a tensor are refused where they come in: a negative extent other
// than reshape's -1, and a shape whose element count passes INT64_MAX (it wrapped to a small
// allocation that later ops read past).
TEST(Tensor, ShapesThatDescribeNoTensorAreRefused) {
  EXPECT_NE(error_of([] {
              reshape(ones({6}), Shape{-2, -3});
            }).find("reshape: negative extent -2"),
            std::string::npos);
  EXPECT_EQ(reshape(ones({6}), Shape{-1, 3}).shape(), Shape({2, 3}));
  // A count that wraps modulo 2^64 to the input's is no match: 9 * 6148914691236517206 is
  // "6" (the shape then read far past the 24 bytes), with or without an inferred extent.
  for (const Shape& wraps : {Shape{9, 6148914691236517206}, Shape{9, 6148914691236517206, -1}}) {
    EXPECT_NE(error_of([&] { reshape(ones({6}), wraps); }).find("more than 2^63 elements"),
              std::string::npos)
        << wraps;
  }
  // An empty shape is empty however large its other extents.
  EXPECT_EQ(reshape(ones({0}), Shape{int64_t{1} << 62, 4, 0}).numel(), 0);
  EXPECT_NE(error_of([] {
              Tensor::empty(Shape{(int64_t{1} << 62) + 1, 4});
            }).find("empty: shape [4611686018427387905, 4] has more than 2^63 bytes"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tensor::empty(Shape{int64_t{1} << 61, 4});
            }).find("more than 2^63"),
            std::string::npos);  // 2^63 elements' worth of bytes
  EXPECT_NE(error_of([] {
              Tensor::empty(Shape{2, -1});
            }).find("empty: negative extent"),
            std::string::npos);
  // Empty, however large the other extents: no bytes, no overflow.
  EXPECT_EQ(Tensor::empty(Shape{int64_t{1} << 62, 4, 0}).numel(), 0);
}

// Note [Uniform draws below hi]: in f16 a draw within 2^-11 of 2 rounds to 2, about 49 of 100,000
// draws from [1, 2); bf16 about 390; f32 rounds within 2^-24 of 1 + 2^-20, one draw in 16. Each
// such draw is lo now: none reaches hi, and twice as many equal lo as round to it from above
// (n / 1,024 in f16), where only those did before.
TEST(Tensor, RandStaysBelowHiAfterRoundingToItsDtype) {
  struct Case {
    DType dtype;
    double lo, hi, expected_at_lo;
  };
  const int64_t n = 100000;
  for (const Case& c : {Case{DType::f16, 1, 2, n / 1024.0}, Case{DType::bf16, 1, 2, n / 128.0},
                        Case{DType::f32, 1, 1 + std::ldexp(1.0, -20), n / 8.0}}) {
    SCOPED_TRACE(dtype_name(c.dtype));
    Generator gen(11);
    int64_t at_lo = 0;
    for (double x : rand({n}, gen, {.dtype = c.dtype}, c.lo, c.hi).to_vector()) {
      ASSERT_GE(x, c.lo);
      ASSERT_LT(x, c.hi);
      at_lo += x == c.lo ? 1 : 0;
    }
    EXPECT_NEAR(static_cast<double>(at_lo), c.expected_at_lo, 4 * std::sqrt(c.expected_at_lo) + 2);
  }
  // hi that the dtype cannot hold: f16's nearest to 0.1 is 0.09998 < 0.1, a draw the range
  // includes, which a comparison in f16 (hi rounded first) turned into lo.
  {
    Generator g16(3);
    int64_t top = 0;
    for (double x : rand({20000}, g16, {.dtype = DType::f16}, 0.0, 0.1).to_vector()) {
      ASSERT_LT(x, 0.1);
      top += x > 0.0999 ? 1 : 0;
    }
    EXPECT_GT(top, 0) << "f16's 0.09998 never drawn: it was replaced by lo";
  }
  Generator gen(1);
  EXPECT_NE(error_of([&] {
              rand({2}, gen, {}, 3.0, 2.0);
            }).find("rand: expected finite bounds with lo <= hi"),
            std::string::npos);
  EXPECT_THROW(rand({2}, gen, {}, 0.0, std::numeric_limits<double>::infinity()), Error);
  EXPECT_EQ(rand({3}, gen, {}, 2.5, 2.5).to_vector(), (std::vector<double>(3, 2.5)));
}

// randn reserves the two draws each value takes: the next draw (rand, a dropout mask) starts
// after them. Reserving one a value let rand reuse randn's Box-Muller inputs.
TEST(Tensor, RandnReservesTwoDrawsAValue) {
  Generator gen(123);
  Tensor a = randn({4}, gen, {.dtype = DType::f64});
  EXPECT_EQ(gen.offset(), 8u);
  Tensor b = rand({4}, gen, {.dtype = DType::f64});
  EXPECT_EQ(gen.offset(), 12u);
  const std::vector<double> u = b.to_vector();
  for (size_t i = 0; i + 1 < u.size(); i += 2) {
    const double z = std::sqrt(-2 * std::log(1 - u[i])) * std::cos(2 * M_PI * u[i + 1]);
    for (double v : a.to_vector()) EXPECT_NE(v, z);
  }
}
