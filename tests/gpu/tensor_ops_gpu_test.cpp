// CUDA vs CPU for the tensor ops for custom layers, through the public ops so that every new
// kernel runs forward and backward: unary/unary_backward (abs ... clamp), binary_math and its
// backward (maximum, minimum, pow, comparisons), where, strided_copy (cat, stack, narrow, slice,
// permute, broadcasting), dim_reduce and its backward (softmax, log_softmax, amax, argmax; the
// warp-per-line path for the last dim and the thread-per-line path for the others). f32, f16 and
// bf16 on the device against f32 on the CPU from the same rounded inputs; odd sizes.
#include <functional>

#include "core/factory.h"
#include "core/ops.h"
#include "gpu_test_util.h"

using namespace frugal;
using namespace frugal::gputest;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Input {
  Shape shape;
  float lo = -2, hi = 2;
};

std::vector<float> floats(const Tensor& t) {
  std::vector<double> v = t.to(Device::cpu()).to(DType::f32).to_vector();
  return std::vector<float>(v.begin(), v.end());
}

// Runs f on the CPU (f32) and on CUDA (dtype t) from the same inputs rounded to t; compares the
// outputs (exactly for u8 and i64 results) and, when `grad`, every input's gradient under the
// upstream gradient w.
void check(const char* name, DType t, const std::vector<Input>& inputs, const Fn& f,
           bool grad = true) {
  SCOPED_TRACE(detail::str(name, " ", dtype_name(t)));
  std::vector<Tensor> cpu_in, gpu_in;
  uint32_t seed = 11;
  for (const Input& in : inputs) {
    auto v = random_values(static_cast<size_t>(in.shape.numel()), seed++, t, in.lo, in.hi);
    Tensor x = from_vector(std::vector<double>(v.begin(), v.end()), in.shape);
    cpu_in.push_back(x.detach().requires_grad_(grad));
    gpu_in.push_back(x.to(t).to(Device::cuda(0)).detach().requires_grad_(grad));
  }
  Tensor ref = f(cpu_in), got = f(gpu_in);
  ASSERT_EQ(got.device(), Device::cuda(0));
  ASSERT_EQ(got.shape(), ref.shape());
  if (!is_floating(ref.dtype())) {
    EXPECT_EQ(got.dtype(), ref.dtype());
    EXPECT_EQ(got.to(Device::cpu()).to_vector(), ref.to_vector());
    return;
  }
  EXPECT_EQ(got.dtype(), t);
  EXPECT_CLOSE(floats(got), floats(ref), tolerance(t));
  if (!grad) return;
  auto w = random_values(static_cast<size_t>(ref.numel()), 99, t, -1, 1);
  Tensor wc = from_vector(std::vector<double>(w.begin(), w.end()), ref.shape());
  sum(mul(ref, wc)).backward();
  sum(mul(got, wc.to(t).to(Device::cuda(0)))).backward();
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    SCOPED_TRACE(detail::str("gradient of input ", i));
    ASSERT_TRUE(gpu_in[i].grad().defined());
    EXPECT_EQ(gpu_in[i].grad().dtype(), t);
    EXPECT_CLOSE(floats(gpu_in[i].grad()), floats(cpu_in[i].grad()), 2 * tolerance(t));
  }
}

}  // namespace

// Note [Integer comparisons]: the integer kernel, i64 past 2^24 and u8, broadcast, against the
// CPU's; and a number against an integer tensor.
TEST(GpuTensorOps, IntegerComparisonsMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::vector<double> va, vb;
  for (int i = 0; i < 7 * 13; ++i) va.push_back(16777216 + (i * 37) % 5);
  for (int i = 0; i < 13; ++i) vb.push_back(16777216 + (i * 11) % 5);
  for (DType dt : {DType::i64, DType::u8}) {
    SCOPED_TRACE(dtype_name(dt));
    const double base = dt == DType::u8 ? 16777216 - 100 : 0;
    std::vector<double> a = va, b = vb;
    for (double& v : a) v -= base;
    for (double& v : b) v -= base;
    Tensor ca = from_vector(a, {7, 13}, {.dtype = dt}), cb = from_vector(b, {13}, {.dtype = dt});
    Tensor ga = ca.to(Device::cuda(0)), gb = cb.to(Device::cuda(0));
    const std::vector<std::function<Tensor(const Tensor&, const Tensor&)>> ops = {
        [](auto& x, auto& y) { return eq(x, y); }, [](auto& x, auto& y) { return ne(x, y); },
        [](auto& x, auto& y) { return lt(x, y); }, [](auto& x, auto& y) { return le(x, y); },
        [](auto& x, auto& y) { return gt(x, y); }, [](auto& x, auto& y) { return ge(x, y); }};
    for (size_t k = 0; k < ops.size(); ++k) {
      SCOPED_TRACE(k);
      Tensor want = ops[k](ca, cb), got = ops[k](ga, gb);
      ASSERT_EQ(got.device(), Device::cuda(0));
      EXPECT_EQ(got.to(Device::cpu()).to_vector(), want.to_vector());
      EXPECT_GT(sum(want.to(DType::f32)).item(), 0.0);
      EXPECT_LT(sum(want.to(DType::f32)).item(), static_cast<double>(want.numel()));
    }
    // Counts and masks to floats on the device, as on the CPU (a count of hits).
    for (DType to : kDTypes) {
      EXPECT_EQ(cast(eq(ga, gb), to).to(Device::cpu()).to_vector(),
                cast(eq(ca, cb), to).to_vector());
      EXPECT_EQ(cast(gb, to).to(Device::cpu()).to_vector(), cast(cb, to).to_vector());
    }
    const double s = 16777218.5 - base;
    EXPECT_EQ(lt(ga, s).to(Device::cpu()).to_vector(), lt(ca, s).to_vector());
    EXPECT_EQ(ge(ga, s).to(Device::cpu()).to_vector(), ge(ca, s).to_vector());
  }
}

TEST(GpuTensorOps, UnaryMathAndBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Shape s{7, 13, 11};
  const Input any{s}, pos{s, 0.3f, 3.0f};
  for (DType t : kDTypes) {
    check("abs", t, {any}, [](auto& in) { return abs(in[0]); });
    check("neg", t, {any}, [](auto& in) { return neg(in[0]); });
    check("exp", t, {any}, [](auto& in) { return exp(in[0]); });
    check("log", t, {pos}, [](auto& in) { return log(in[0]); });
    check("sqrt", t, {pos}, [](auto& in) { return sqrt(in[0]); });
    check("rsqrt", t, {pos}, [](auto& in) { return rsqrt(in[0]); });
    check("pow", t, {pos}, [](auto& in) { return pow(in[0], 1.5); });
    check("sigmoid", t, {any}, [](auto& in) { return sigmoid(in[0]); });
    check("tanh", t, {any}, [](auto& in) { return tanh(in[0]); });
    check("clamp", t, {any}, [](auto& in) { return clamp(in[0], -0.7, 1.1); });
    check("hardswish", t, {Input{s, -5, 5}},
          [](auto& in) { return div(mul(in[0], clamp(add(in[0], 3.0), 0.0, 6.0)), 6.0); });
  }
}

TEST(GpuTensorOps, BinaryMathComparisonsAndWhereMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Input a{{5, 7, 9}}, b{{7, 1}}, pos{{5, 7, 9}, 0.5f, 2.0f};
  for (DType t : kDTypes) {
    check("maximum", t, {a, b}, [](auto& in) { return maximum(in[0], in[1]); });
    check("minimum", t, {a, b}, [](auto& in) { return minimum(in[0], in[1]); });
    check("pow", t, {pos, b}, [](auto& in) { return pow(in[0], in[1]); });
    // Ties: a against itself rounded coarsely, so maximum's half/half split runs too.
    check("maximum ties", t, {a}, [](auto& in) { return maximum(in[0], clamp(in[0], -0.5, 0.5)); });
    check(
        "lt", t, {a, b}, [](auto& in) { return lt(in[0], in[1]); }, false);
    check(
        "ge scalar", t, {a}, [](auto& in) { return ge(in[0], 0.25); }, false);
    check(
        "eq", t, {a}, [](auto& in) { return eq(in[0], clamp(in[0], 0.0)); }, false);
    check("where", t, {a, b}, [](auto& in) { return where(gt(in[0], 0.0), in[0], in[1]); });
  }
}

TEST(GpuTensorOps, SoftmaxAmaxArgmaxMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Input x{{6, 5, 37}}, wide{{3, 1000}};
  for (DType t : kDTypes) {
    for (int64_t d : {0, 1, 2}) {
      SCOPED_TRACE(d);
      check("softmax", t, {x}, [d](auto& in) { return softmax(in[0], d); });
      check("log_softmax", t, {x}, [d](auto& in) { return log_softmax(in[0], d); });
      check("amax", t, {x}, [d](auto& in) { return amax(in[0], {d}, true); });
      check(
          "argmax", t, {x}, [d](auto& in) { return argmax(in[0], d); }, false);
    }
    check("softmax wide", t, {wide}, [](auto& in) { return softmax(in[0], 1); });
    check("log_softmax wide", t, {wide}, [](auto& in) { return log_softmax(in[0], -1); });
    check("amax wide", t, {wide}, [](auto& in) { return amax(in[0], {1}); });
    check(
        "argmax wide", t, {wide}, [](auto& in) { return argmax(in[0], 1); }, false);
    check("amax permuted", t, {x}, [](auto& in) { return amax(in[0], {0, 2}); });
    check("amax all", t, {x}, [](auto& in) { return amax(in[0]); });
    // Ties in amax: clamp makes many equal maxima, whose gradient is split evenly.
    check("amax ties", t, {x}, [](auto& in) { return amax(clamp(in[0], std::nullopt, 0.5), {2}); });
  }
}

TEST(GpuTensorOps, CopyingLayoutOpsMatchCpu) {
  SKIP_WITHOUT_GPU();
  const Input a{{3, 5, 7}}, b{{3, 2, 7}};
  for (DType t : kDTypes) {
    check("cat", t, {a, b}, [](auto& in) { return cat({in[0], in[1]}, 1); });
    check("stack", t, {a, a}, [](auto& in) { return stack({in[0], in[1]}, 2); });
    check("narrow", t, {a}, [](auto& in) { return narrow(in[0], 2, 1, 5); });
    check("slice", t, {a}, [](auto& in) { return slice(in[0], 1, 1, 5, 3); });
    check("permute", t, {a}, [](auto& in) { return permute(in[0], {2, 0, 1}); });
    check("transpose", t, {a}, [](auto& in) { return transpose(in[0], 0, 1); });
    check("broadcast where", t, {Input{{5, 1}}, Input{{7}}},
          [](auto& in) { return where(gt(in[0], in[1]), in[0], in[1]); });
    check(
        "permute u8", t, {a},
        [](auto& in) {
          return permute(gt(in[0], 0.0), {1, 2, 0});
        },
        false);
  }
}
