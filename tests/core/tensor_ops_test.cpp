// The tensor ops for custom layers (comparisons, where, math, softmax, amax/argmax over dims,
// cat/stack/narrow/slice/permute/transpose): values against hand-computed results, 16-bit CPU
// results against f32, meta-device shapes, and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "common/error_of.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"

using namespace frugal;
using frugal::test::error_of;

namespace {

#define EXPECT_ERROR(stmt, text) \
  EXPECT_NE(error_of([&] { stmt; }).find(text), std::string::npos) << error_of([&] { stmt; })

Tensor t(const std::vector<double>& v, const Shape& s, DType dt = DType::f32) {
  return from_vector(v, s, {.dtype = dt});
}

using V = std::vector<double>;

}  // namespace

TEST(TensorOps, ComparisonsBroadcastAndGiveU8) {
  Tensor a = t({1, 2, 3, 4, 5, 6}, {2, 3}), b = t({2, 2, 7}, {3});
  Tensor lt_ab = lt(a, b);
  EXPECT_EQ(lt_ab.dtype(), DType::u8);
  EXPECT_EQ(lt_ab.shape(), (Shape{2, 3}));
  EXPECT_EQ(lt_ab.to_vector(), (V{1, 0, 1, 0, 0, 1}));
  EXPECT_EQ(le(a, b).to_vector(), (V{1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(gt(a, b).to_vector(), (V{0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(ge(a, b).to_vector(), (V{0, 1, 0, 1, 1, 0}));
  EXPECT_EQ(eq(a, b).to_vector(), (V{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(ne(a, b).to_vector(), (V{1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(gt(a, 3.0).to_vector(), (V{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(le(a, 3.0).to_vector(), (V{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(eq(a, 4.0).to_vector(), (V{0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(ne(a, 4.0).to_vector(), (V{1, 1, 1, 0, 1, 1}));
  EXPECT_EQ(lt(a, 2.0).to_vector(), (V{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ge(a, 6.0).to_vector(), (V{0, 0, 0, 0, 0, 1}));
  // Mixed dtypes promote: f16 2.0 against f64 2.0 is equal; NaN is unequal to itself.
  EXPECT_EQ(eq(t({2, NAN}, {2}, DType::f16), t({2, NAN}, {2}, DType::f64)).to_vector(), (V{1, 0}));
  EXPECT_FALSE(lt(a.requires_grad_(), b).requires_grad());
  // A 0-d tensor against a number stays 0-d, as in PyTorch (it became [1]).
  EXPECT_EQ(gt(full({}, 2.0), 1.0).shape(), Shape{});
  EXPECT_EQ(eq(full({}, 3.0, {.dtype = DType::i64}), 3.0).shape(), Shape{});
  EXPECT_EQ(gt(full({}, 2.0), 1.0).item(), 1.0);
}

// Note [Integer comparisons]: accuracy as in PyTorch, exact past 2^24 (where f32 makes 2^24 + 1
// equal to 2^24), fractions as the integer comparison they equal, a number outside the dtype or
// NaN alike for every element. They used to be refused ("expected floating tensors").
TEST(TensorOps, IntegerTensorsCompareExactlyWithTheirDtypeAndWithNumbers) {
  const DType i64 = DType::i64, u8 = DType::u8;
  Tensor logits = t({0.1, 0.9, 0.3, 2.0, 1.0, 0.5, 0.2, 0.1, 0.7}, {3, 3});
  Tensor labels = t({1, 0, 1}, {3}, i64);
  Tensor hits = eq(argmax(logits, 1), labels);
  EXPECT_EQ(hits.dtype(), u8);
  EXPECT_EQ(hits.to_vector(), (V{1, 1, 0}));
  Tensor big = t({16777217, 16777216}, {2}, i64);
  EXPECT_EQ(eq(big, t({16777216}, {1}, i64)).to_vector(), (V{0, 1}));
  EXPECT_EQ(gt(big, 16777216.0).to_vector(), (V{1, 0}));
  EXPECT_EQ(ne(t({1, 2}, {2}, i64), t({1, 2}, {2, 1}, i64)).to_vector(), (V{0, 1, 1, 0}));
  Tensor x = t({1, 2, 3}, {3}, i64);
  EXPECT_EQ(lt(x, 2.5).to_vector(), (V{1, 1, 0}));
  EXPECT_EQ(le(x, 2.5).to_vector(), (V{1, 1, 0}));
  EXPECT_EQ(gt(x, 2.5).to_vector(), (V{0, 0, 1}));
  EXPECT_EQ(ge(x, 2.5).to_vector(), (V{0, 0, 1}));
  EXPECT_EQ(eq(x, 2.5).to_vector(), (V{0, 0, 0}));
  EXPECT_EQ(ne(x, 2.5).to_vector(), (V{1, 1, 1}));
  EXPECT_EQ(ge(x, -2.5).to_vector(), (V{1, 1, 1}));
  EXPECT_EQ(le(x, 2.0).to_vector(), (V{1, 1, 0}));
  EXPECT_EQ(lt(x, 1e30).to_vector(), (V{1, 1, 1}));
  EXPECT_EQ(gt(x, -1e30).to_vector(), (V{1, 1, 1}));
  EXPECT_EQ(eq(x, std::ldexp(1.0, 63)).to_vector(), (V{0, 0, 0}));
  EXPECT_EQ(le(x, NAN).to_vector(), (V{0, 0, 0}));
  Tensor m = t({0, 7, 255}, {3}, u8);
  EXPECT_EQ(lt(m, 300.0).to_vector(), (V{1, 1, 1}));
  EXPECT_EQ(ge(m, -1.0).to_vector(), (V{1, 1, 1}));
  EXPECT_EQ(eq(m, 7.0).to_vector(), (V{0, 1, 0}));
  EXPECT_EQ(gt(m, t({7}, {1}, u8)).to_vector(), (V{0, 0, 1}));
  EXPECT_EQ(ne(m, NAN).to_vector(), (V{1, 1, 1}));
  EXPECT_ERROR(eq(x, t({1, 2, 3}, {3})),
               "eq: compares integer tensors of one dtype, got [3] i64 cpu and [3] f32");
  EXPECT_ERROR(lt(x, m), "lt: compares integer tensors of one dtype");
  EXPECT_ERROR(eq(x, t({1, 2}, {2}, i64)), "eq: shapes [3] and [2] cannot be broadcast");
  EXPECT_ERROR(maximum(x, x), "expected floating tensors");
  // A count of hits: reductions take floats, and their error says how (it named only the dtype).
  EXPECT_ERROR(sum(hits), "sum: expected a floating tensor, got [3] u8 cpu; cast it first");
  EXPECT_EQ(sum(cast(hits, DType::f32)).item(), 2.0);
  Tensor meta = Tensor::empty({4, 1}, {i64, Device::meta()});
  EXPECT_EQ(eq(meta, Tensor::empty({3}, {i64, Device::meta()})).shape(), (Shape{4, 3}));
}

TEST(TensorOps, WhereBroadcastsAndRoutesTheGradient) {
  Tensor cond = from_vector({1, 0, 1}, {3}, {.dtype = DType::u8});
  Tensor a = t({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = t({-1, -2}, {2, 1}).requires_grad_();
  Tensor y = where(cond, a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector(), (V{1, -1, 3, 4, -2, 6}));
  sum(y).backward();
  EXPECT_EQ(a.grad().to_vector(), (V{1, 0, 1, 1, 0, 1}));
  EXPECT_EQ(b.grad().to_vector(), (V{1, 1}));
  // Leaky relu from ops, the header's example.
  Tensor x = t({-2, 3}, {2});
  EXPECT_TRUE(allclose(where(gt(x, 0.0), x, mul(x, 0.1)), t({-0.2, 3}, {2})));
}

TEST(TensorOps, UnaryMathValues) {
  Tensor x = t({-2, -0.5, 0, 0.5, 3}, {5});
  EXPECT_EQ(abs(x).to_vector(), (V{2, 0.5, 0, 0.5, 3}));
  EXPECT_EQ(neg(x).to_vector(), (V{2, 0.5, 0, -0.5, -3}));
  EXPECT_EQ(clamp(x, -1.0, 1.0).to_vector(), (V{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(clamp(x, 0.0).to_vector(), (V{0, 0, 0, 0.5, 3}));
  EXPECT_EQ(clamp(x, std::nullopt, 0.0).to_vector(), (V{-2, -0.5, 0, 0, 0}));
  EXPECT_EQ(clamp(x, 2.0, 1.0).to_vector(), (V{1, 1, 1, 1, 1}));  // lo > hi: hi, as PyTorch
  Tensor p = t({0.25, 1, 4}, {3});
  EXPECT_TRUE(allclose(sqrt(p), t({0.5, 1, 2}, {3})));
  EXPECT_TRUE(allclose(rsqrt(p), t({2, 1, 0.5}, {3})));
  EXPECT_TRUE(allclose(exp(t({0, 1}, {2})), t({1, std::exp(1.0)}, {2})));
  EXPECT_TRUE(allclose(log(p), t({std::log(0.25), 0, std::log(4.0)}, {3})));
  EXPECT_TRUE(allclose(pow(p, 1.5), t({0.125, 1, 8}, {3})));
  EXPECT_TRUE(allclose(pow(p, t({2, 3, 0.5}, {3})), t({0.0625, 1, 2}, {3})));
  EXPECT_TRUE(allclose(sigmoid(t({0, 2}, {2})), t({0.5, 1 / (1 + std::exp(-2.0))}, {2})));
  EXPECT_TRUE(allclose(tanh(t({0, 0.5}, {2})), t({0, std::tanh(0.5)}, {2})));
  EXPECT_ERROR(clamp(x, std::nullopt, std::nullopt), "clamp: at least one of lo and hi");
}

TEST(TensorOps, MaximumMinimumSplitTiesHalfHalf) {
  Tensor a = t({1, 5, 3}, {3}).requires_grad_(), b = t({2, 4, 3}, {3}).requires_grad_();
  Tensor y = maximum(a, b);
  EXPECT_EQ(y.to_vector(), (V{2, 5, 3}));
  EXPECT_EQ(minimum(a, b).to_vector(), (V{1, 4, 3}));
  sum(y).backward();
  EXPECT_EQ(a.grad().to_vector(), (V{0, 1, 0.5}));
  EXPECT_EQ(b.grad().to_vector(), (V{1, 0, 0.5}));
  // Broadcast: a [2, 1] against b [3]; b's gradient sums over the rows.
  Tensor c = t({0, 10}, {2, 1}).requires_grad_(), d = t({-1, 0, 1}, {3}).requires_grad_();
  Tensor m = minimum(c, d);
  EXPECT_EQ(m.to_vector(), (V{-1, 0, 0, -1, 0, 1}));
  sum(m).backward();
  EXPECT_EQ(c.grad().to_vector(), (V{1.5, 0}));
  EXPECT_EQ(d.grad().to_vector(), (V{2, 1.5, 1}));
}

TEST(TensorOps, SoftmaxAndLogSoftmaxAreStable) {
  Tensor x = t({1, 2, 3, 1000, 1000, 1000}, {2, 3});
  Tensor s = softmax(x, 1);
  double e1 = std::exp(-2.0), e2 = std::exp(-1.0), z = e1 + e2 + 1;
  EXPECT_TRUE(allclose(s, t({e1 / z, e2 / z, 1 / z, 1. / 3, 1. / 3, 1. / 3}, {2, 3}), 1e-5, 1e-7));
  // x - logsumexp(x); 1000 - 1001.0986 in f32 keeps about 1e-4.
  double lz = std::log(z), l3 = std::log(3.0);
  EXPECT_TRUE(
      allclose(log_softmax(x, -1), t({-2 - lz, -1 - lz, -lz, -l3, -l3, -l3}, {2, 3}), 0, 1e-4));
  EXPECT_TRUE(allclose(log(s), log_softmax(x, 1), 0, 1e-4));
  // Along dim 0 of the same data: columns.
  Tensor c = softmax(t({0, 0, std::log(3.0), 0}, {2, 2}), 0);
  EXPECT_TRUE(allclose(c, t({0.25, 0.5, 0.75, 0.5}, {2, 2})));
}

TEST(TensorOps, SumMeanAmaxOverDimsWithKeepdim) {
  Tensor x = t({1, 7, 3, 7, 2, 7, 0, 4}, {2, 2, 2});
  EXPECT_EQ(sum(x, {1}, true).shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(sum(x, {0, 2}).to_vector(), (V{17, 14}));
  EXPECT_EQ(mean(x, {-1}).to_vector(), (V{4, 5, 4.5, 2}));
  EXPECT_EQ(amax(x).to_vector(), (V{7}));
  EXPECT_EQ(amax(x, {2}).to_vector(), (V{7, 7, 7, 4}));
  EXPECT_EQ(amax(x, {0}, true).shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(amax(x, {0}).to_vector(), (V{2, 7, 3, 7}));
  EXPECT_EQ(amax(x, {0, 2}).to_vector(), (V{7, 7}));  // not one block: permuted inside
  EXPECT_EQ(amax(x, {0, 2}, true).shape(), (Shape{1, 2, 1}));
  // The gradient goes to the maxima, split evenly between ties (7 twice for index 0 of dim 1).
  x.requires_grad_();
  sum(amax(x, {0, 2})).backward();
  EXPECT_EQ(x.grad().to_vector(), (V{0, 0.5, 0, 1, 0, 0.5, 0, 0}));
}

TEST(TensorOps, ArgmaxOverAnyDimTakesTheFirstOfTies) {
  Tensor x = t({1, 3, 3, 0, 2, 2, 5, 0}, {2, 2, 2});
  EXPECT_EQ(argmax(x, 0).to_vector(), (V{1, 0, 1, 0}));  // 0 vs 0 at the end: the first
  EXPECT_EQ(argmax(x, 2).to_vector(), (V{1, 0, 0, 0}));  // [2, 2]: the first
  EXPECT_EQ(argmax(x, 1).to_vector(), (V{1, 0, 1, 0}));
  EXPECT_EQ(argmax(x, -1, true).shape(), (Shape{2, 2, 1}));
  EXPECT_EQ(argmax(x, 1).dtype(), DType::i64);
  EXPECT_EQ(argmax(t({1, NAN, 2}, {3}), 0).to_vector(), (V{1}));  // NaN is the maximum
  // The row-wise overload still works.
  EXPECT_EQ(argmax(t({0, 2, 2, 9, 1, 1}, {2, 3})).to_vector(), (V{1, 0}));
}

TEST(TensorOps, CatStackNarrowSliceShapesAndValues) {
  Tensor a = t({1, 2, 3, 4}, {2, 2}), b = t({5, 6}, {2, 1});
  Tensor c = cat({a, b}, 1);
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(c.to_vector(), (V{1, 2, 5, 3, 4, 6}));
  EXPECT_EQ(cat({a, t({7, 8}, {1, 2})}, 0).to_vector(), (V{1, 2, 3, 4, 7, 8}));
  Tensor s = stack({a, a}, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(s.to_vector(), (V{1, 2, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(stack({a, a}, -1).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(stack({a, a}, 0).to_vector(), (V{1, 2, 3, 4, 1, 2, 3, 4}));
  Tensor r = t({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 6});
  EXPECT_EQ(narrow(r, 1, 2, 3).to_vector(), (V{2, 3, 4, 8, 9, 10}));
  EXPECT_EQ(narrow(r, 0, -1, 1).to_vector(), (V{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(slice(r, 1, 1, 100, 2).to_vector(), (V{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(slice(r, -1, -2, 6).to_vector(), (V{4, 5, 10, 11}));
  EXPECT_EQ(slice(r, 1, 4, 2).shape(), (Shape{2, 0}));
  // Mixed dtypes promote; gradients come back per input in its own dtype.
  Tensor h = t({1, 2}, {2, 1}, DType::f16).requires_grad_();
  Tensor a2 = t({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor m = cat({a2, h}, 1);
  EXPECT_EQ(m.dtype(), DType::f32);
  sum(mul(m, t({1, 2, 3}, {3}))).backward();
  EXPECT_EQ(h.grad().dtype(), DType::f16);
  EXPECT_EQ(h.grad().to_vector(), (V{3, 3}));
  EXPECT_EQ(a2.grad().to_vector(), (V{1, 2, 1, 2}));
}

TEST(TensorOps, PermuteAndTransposeCopy) {
  Tensor x = t({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  Tensor p = permute(x, {2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(p.to_vector(), (V{0, 3, 1, 4, 2, 5}));
  Tensor tr = transpose(x, 1, 2);
  EXPECT_EQ(tr.shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(tr.to_vector(), (V{0, 3, 1, 4, 2, 5}));
  fill_(x, 9.0);  // a copy, not a view
  EXPECT_EQ(p.to_vector()[1], 3.0);
  // NHWC -> NCHW for u8 masks too (copies move bytes of any dtype).
  Tensor mask = from_vector({1, 0, 0, 1}, {1, 2, 2}, {.dtype = DType::u8});
  EXPECT_EQ(permute(mask, {0, 2, 1}).to_vector(), (V{1, 0, 0, 1}));
}

TEST(TensorOps, SixteenBitCpuResultsAreCloseToF32) {
  Generator gen(5);
  Tensor x = randn({3, 4, 5}, gen), y = randn({4, 5}, gen);
  Tensor xp = add(abs(x), 0.1);
  using F = std::function<Tensor(const Tensor&, const Tensor&)>;
  std::vector<std::pair<const char*, F>> cases = {
      {"abs", [](auto& a, auto&) { return abs(a); }},
      {"exp", [](auto& a, auto&) { return exp(a); }},
      {"log", [](auto&, auto& p) { return log(p); }},
      {"sqrt", [](auto&, auto& p) { return sqrt(p); }},
      {"rsqrt", [](auto&, auto& p) { return rsqrt(p); }},
      {"pow", [](auto&, auto& p) { return pow(p, 1.7); }},
      {"clamp", [](auto& a, auto&) { return clamp(a, -0.5, 0.5); }},
      {"sigmoid", [](auto& a, auto&) { return sigmoid(a); }},
      {"tanh", [](auto& a, auto&) { return tanh(a); }},
      {"softmax", [](auto& a, auto&) { return softmax(a, 1); }},
      {"log_softmax", [](auto& a, auto&) { return log_softmax(a, -1); }},
      {"amax",
       [](auto& a, auto&) {
         return amax(a, {0, 2});
       }},
      {"permute",
       [](auto& a, auto&) {
         return permute(a, {2, 0, 1});
       }},
      {"cat",
       [](auto& a, auto& p) {
         return cat({a, p}, 1);
       }},
  };
  for (DType dt : {DType::f16, DType::bf16}) {
    double tol = dt == DType::f16 ? 2e-3 : 1.6e-2;
    for (auto& [name, f] : cases) {
      SCOPED_TRACE(std::string(name) + " " + dtype_name(dt));
      Tensor lo_x = x.to(dt), lo_p = xp.to(dt);
      Tensor ref = f(lo_x.to(DType::f32), lo_p.to(DType::f32));  // same inputs, f32 math
      Tensor got = f(lo_x, lo_p);
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_TRUE(allclose(got.to(DType::f32), ref, tol, tol));
    }
    Tensor xm = x.to(dt), ym = y.to(dt);
    EXPECT_TRUE(allclose(maximum(xm, ym).to(DType::f32),
                         maximum(xm.to(DType::f32), ym.to(DType::f32)), tol, tol));
    EXPECT_EQ(gt(xm, ym).to_vector(), gt(xm.to(DType::f32), ym.to(DType::f32)).to_vector());
    EXPECT_EQ(argmax(xm, 1).to_vector(), argmax(xm.to(DType::f32), 1).to_vector());
  }
}

TEST(TensorOps, MetaDeviceInfersShapesAndDtypes) {
  TensorOptions meta{.dtype = DType::f16, .device = Device::meta()};
  Tensor x = Tensor::empty({2, 3, 4}, meta), b = Tensor::empty({4}, {.device = Device::meta()});
  EXPECT_EQ(gt(x, b).dtype(), DType::u8);
  EXPECT_EQ(gt(x, b).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(lt(x, 0.0).device(), Device::meta());
  EXPECT_EQ(maximum(x, b).dtype(), DType::f32);  // promoted
  EXPECT_EQ(exp(x).dtype(), DType::f16);
  EXPECT_EQ(clamp(x, 0.0, 6.0).shape(), x.shape());
  EXPECT_EQ(where(gt(x, 0.0), x, b).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(softmax(x, 1).shape(), x.shape());
  EXPECT_EQ(amax(x, {0, 2}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(amax(x, {1}).shape(), (Shape{2, 4}));
  EXPECT_EQ(argmax(x, 2).shape(), (Shape{2, 3}));
  EXPECT_EQ(argmax(x, 2).dtype(), DType::i64);
  EXPECT_EQ(cat({x, x}, 2).shape(), (Shape{2, 3, 8}));
  EXPECT_EQ(stack({x, x}, 0).shape(), (Shape{2, 2, 3, 4}));
  EXPECT_EQ(narrow(x, 1, 1, 2).shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(permute(x, {2, 1, 0}).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(transpose(x, 0, -1).shape(), (Shape{4, 3, 2}));
  // Backward runs on meta too (shapes of gradients only).
  Tensor w = Tensor::empty({2, 3, 4}, {.device = Device::meta(), .requires_grad = true});
  sum(mul(softmax(clamp(w, 0.0, 6.0), -1), amax(w, {1}, true))).backward();
  EXPECT_EQ(w.grad().shape(), w.shape());
}

TEST(TensorOps, ErrorsNameTheOpShapesAndDtypes) {
  Tensor a = zeros({2, 3}), b = zeros({4, 3}, {.dtype = DType::f16});
  EXPECT_ERROR(
      maximum(a, b),
      "maximum: shapes [2, 3] and [4, 3] cannot be broadcast ([2, 3] f32 cpu and [4, 3] f16 cpu)");
  EXPECT_ERROR(lt(a, b), "lt: shapes [2, 3] and [4, 3] cannot be broadcast");
  EXPECT_ERROR(where(a, a, a), "where: the condition must be u8, got [2, 3] f32 cpu");
  EXPECT_ERROR(where(gt(a, 0.0), a, b), "where: shapes [2, 3] and [4, 3] cannot be broadcast");
  EXPECT_ERROR(cat({a, zeros({2, 2, 1})}, 1),
               "cat: tensor 1 [2, 2, 1] f32 cpu does not fit tensor 0 [2, 3] f32 cpu");
  EXPECT_ERROR(cat({a, b}, 1), "cat: tensor 1 [4, 3] f16 cpu does not fit");
  EXPECT_ERROR(stack({a, zeros({3, 2})}, 0), "stack: tensor 1 [3, 2] f32 cpu differs in shape");
  EXPECT_ERROR(narrow(a, 1, 2, 2), "narrow: [2, 4) is outside dim 1 of [2, 3] f32 cpu");
  EXPECT_ERROR(softmax(a, 2), "softmax: dim 2 out of range for shape [2, 3]");
  EXPECT_ERROR(argmax(a, -3), "argmax: dim -3 out of range for shape [2, 3]");
  EXPECT_ERROR(permute(a, {0, 0}),
               "permute: [0, 0] is not a permutation of the dims of [2, 3] f32 cpu");
  EXPECT_ERROR(amax(a, {1, 1}), "amax: a dim appears twice");
  EXPECT_ERROR(amax(zeros({2, 0}), {1}), "amax: cannot reduce the empty dim 1 of [2, 0] f32 cpu");
  // A dim named twice (1 and -1 of a 2-D tensor) is refused, as in PyTorch and as amax does.
  EXPECT_ERROR(sum(zeros({2, 3}), {1, -1}), "sum: a dim appears twice in [1, 1] for shape [2, 3]");
  EXPECT_ERROR(mean(zeros({2, 3}), {0, 0}), "mean: a dim appears twice");
  // Over an empty dim the sum is 0 and the mean 0 / 0, NaN, as in PyTorch.
  EXPECT_EQ(sum(zeros({0, 3}), {0}).to_vector(), (std::vector<double>{0, 0, 0}));
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::vector<double> m = mean(zeros({0, 3}, {.dtype = dt}), {0}).to_vector();
    ASSERT_EQ(m.size(), 3u);
    for (double v : m) EXPECT_TRUE(std::isnan(v)) << dtype_name(dt);
  }
  EXPECT_EQ(mean(zeros({2, 0}), {0}).numel(), 0);  // nothing to fill
  EXPECT_ERROR(exp(zeros({2}, {.dtype = DType::i64})),
               "exp: expected a floating tensor, got [2] i64 cpu");
  EXPECT_ERROR(pow(a, zeros({2})), "pow: shapes [2, 3] and [2] cannot be broadcast");
}
