// A dry run on meta that predicts a CUDA step asks for the kernel scratch CUDA's max-pool
// backward takes (kernels/pooling.h), so the prediction counts it where it sits on the peak
// (ResNet-18 with checkpointed blocks: 25.7 MiB in f16 at batch 128, at the end of backward).
#include <gtest/gtest.h>

#include <vector>

#include "core/factory.h"
#include "kernels/conv_workspace.h"
#include "kernels/pooling.h"
#include "memory/step_trace.h"
#include "nn/functional.h"

using namespace frugal;
namespace F = frugal::nn::functional;

namespace {

// The workspace allocations of one max-pool forward and backward on meta, in bytes.
std::vector<size_t> pool_scratch(int64_t kernel) {
  memory::StepRecorder rec(Device::meta());
  {
    Tensor x = Tensor::empty({2, 40, 36, 3}, {.dtype = DType::f16, .device = Device::meta()});
    x.requires_grad_();
    Tensor y = F::max_pool2d(x, {.kernel = kernel, .stride = 2, .padding = kernel / 2});
    y.backward(Tensor::empty(y.shape(), y.options()));
  }
  std::vector<size_t> out;
  for (const auto& a : rec.finish().allocations) {
    if (a.category == memory::Category::workspace) {
      EXPECT_NE(a.end, memory::kStillLive) << "scratch lives for the kernel's call only";
      out.push_back(a.bytes);
    }
  }
  return out;
}

}  // namespace

TEST(MetaPoolScratch, APredictionForCudaAsksForTheMaxPoolBackwardsScratch) {
  EXPECT_TRUE(pool_scratch(3).empty()) << "a dry run for the CPU asks for none";
  kernels::MetaPredictsCuda predicting;
  // 3x3, stride 2, padding 1 over 40x36: 20x18 outputs per channel, a byte each.
  EXPECT_EQ(pool_scratch(3), std::vector<size_t>{2 * 20 * 18 * 3});
  // A 17x17 window (padding 8: 20x18 outputs again) numbers its positions in two bytes.
  EXPECT_EQ(pool_scratch(17), std::vector<size_t>{2 * 20 * 18 * 3 * 2});
}
