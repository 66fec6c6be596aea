// 16-bit tensors on the CPU are computed in f32 inside the kernels (Note [CPU dtypes]): an op
// on a bf16 or f16 input allocates its 16-bit output and kernel workspace, never an f32 copy of
// its input or output. The allocation events tell: at the op's peak, everything that is not
// workspace is the output itself.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "memory/allocator.h"
#include "memory/events.h"
#include "nn/functional.h"

using namespace frugal;
namespace F = frugal::nn::functional;

namespace {

// Runs op under a PeakTracker and returns the bytes beyond the output that were alive at the
// op's peak, workspace left out (and the output's own bytes in `out_bytes`).
int64_t non_workspace_bytes_beyond_output(const std::function<Tensor()>& op) {
  const int64_t before = memory::cpu_allocator().stats().allocated_bytes.current;
  memory::PeakTracker tracker(Device::cpu(), before);
  Tensor y = op();
  memory::PeakTracker::Moment p = tracker.at_peak();
  const int64_t workspace = p.by_category[static_cast<size_t>(memory::Category::workspace)];
  return p.bytes - before - workspace - static_cast<int64_t>(y.nbytes());
}

Tensor random(const Shape& s, DType dt, uint64_t seed) {
  Generator gen(seed);
  return rand(s, gen, {dt, Device::cpu()}, -1, 1);
}

TEST(CpuHalfMemory, OpsOnSixteenBitInputsAllocateNoF32Copies) {
  autograd::NoGradGuard no_grad;
  for (DType dt : {DType::bf16, DType::f16}) {
    const std::string name(dtype_name(dt));
    Tensor x = random(Shape{8, 16, 16, 32}, dt, 1);
    Tensor w1 = random(Shape{48, 1, 1, 32}, dt, 2);
    Tensor w3 = random(Shape{48, 3, 3, 32}, dt, 3);
    Tensor wd = random(Shape{32, 3, 3, 1}, dt, 4);
    Tensor b = random(Shape{48}, dt, 5);
    EXPECT_EQ(non_workspace_bytes_beyond_output([&] { return F::conv2d(x, w1, b, {}); }), 0)
        << name << " pointwise conv";
    F::Conv2dOptions stem;
    stem.stride = 2, stem.padding = 1;
    EXPECT_EQ(non_workspace_bytes_beyond_output([&] { return F::conv2d(x, w3, b, stem); }), 0)
        << name << " 3x3 conv";
    F::Conv2dOptions dw;
    dw.padding = 1, dw.groups = 32;
    EXPECT_EQ(non_workspace_bytes_beyond_output([&] { return F::conv2d(x, wd, Tensor(), dw); }), 0)
        << name << " depthwise conv";
    Tensor gamma = ones(Shape{32}), beta = zeros(Shape{32});
    Tensor rm = zeros(Shape{32}), rv = ones(Shape{32});
    F::BatchNormOptions bn;
    bn.activation = F::Activation::relu6;
    // the saved statistics, mean and invstd: two [C] f32 tensors
    EXPECT_EQ(non_workspace_bytes_beyond_output(
                  [&] { return F::batch_norm(x, gamma, beta, rm, rv, bn); }),
              2 * 32 * 4)
        << name << " batch norm + relu6";
    EXPECT_EQ(non_workspace_bytes_beyond_output(
                  [&] { return F::activation(F::Activation::hardswish, x); }),
              0)
        << name << " hardswish";
    EXPECT_EQ(non_workspace_bytes_beyond_output([&] { return add(x, x); }), 0) << name << " add";
    EXPECT_EQ(non_workspace_bytes_beyond_output([&] { return F::global_avg_pool(x); }), 0)
        << name << " global average pool";
  }
}

}  // namespace
