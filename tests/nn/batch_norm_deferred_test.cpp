// A training batch norm defers writing its output (Note [Deferred writes] in core/tensor.h, Note
// [Batch norm inside the depthwise convolution] in kernels/conv.h): the output read later holds
// the values an immediate write gives, bit for bit; only relu, relu6 and identity outputs of
// inputs without a recipe are deferred, and nothing without gradients; a deferred output whose
// inputs were changed in place refuses to be read; a residual add sums a deferred output without
// writing it (Note [Residual sums of deferred batch norms] in nn/batch_norm_deferred.h), giving
// the sum of the written output bit for bit, in the forward and in its recompute. (Backward writing
// an output still held, unread, is in tests/gpu/bn_input_conv_gpu_test.cpp: only a CUDA depthwise
// conv leaves it unwritten.)
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"

using namespace frugal;
namespace F = frugal::nn::functional;
using F::Activation;

namespace {

struct Inputs {
  Tensor z, gamma, beta;
};

Inputs inputs(bool requires_grad) {
  Generator gen(5);
  Inputs in{randn({3, 5, 4, 6}, gen), rand({6}, gen, {}, 0.5, 1.5), randn({6}, gen)};
  in.z.requires_grad_(requires_grad);
  return in;
}

// Runs `read` and expects its error to name `op`, the changed input `what`, and the change.
template <typename Read>
void expect_changed_input_error(Read read, const char* op, const char* what) {
  try {
    read();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(op), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find("modified in place"), std::string::npos) << msg;
  }
}

}  // namespace

TEST(BatchNormDeferred, TheOutputReadLaterIsTheImmediateOneBitForBit) {
  for (Activation act : {Activation::relu, Activation::relu6, Activation::identity}) {
    Inputs a = inputs(true), b = inputs(false);
    Tensor deferred = F::batch_norm(a.z, a.gamma, a.beta, Tensor(), Tensor(), {.activation = act});
    Tensor immediate = F::batch_norm(b.z, b.gamma, b.beta, Tensor(), Tensor(), {.activation = act});
    EXPECT_NE(deferred.deferred_write(), nullptr);
    EXPECT_EQ(immediate.deferred_write(), nullptr) << "nothing needs gradients: written at once";
    EXPECT_EQ(deferred.to_vector(), immediate.to_vector());
  }
}

TEST(BatchNormDeferred, OnlyWhatADepthwiseConvOrAnAddCouldReadIsDeferred) {
  // Activations no depthwise kernel applies in its loads: the reader writes it anyway.
  for (Activation act : {Activation::silu, Activation::hardswish}) {
    Inputs a = inputs(true);
    Tensor y = F::batch_norm(a.z, a.gamma, a.beta, Tensor(), Tensor(), {.activation = act});
    EXPECT_EQ(y.deferred_write(), nullptr) << static_cast<int>(act);
  }
  // An input with a recipe of its own: backward keeps only the recipe, so a deferred write would
  // hold the input's bytes past the batch norm (and past where the meta device frees them).
  Inputs a = inputs(true);
  Tensor first = F::batch_norm(a.z, a.gamma, a.beta, Tensor(), Tensor(), {});
  Tensor second =
      F::batch_norm(first, a.gamma, a.beta, Tensor(), Tensor(), {.activation = Activation::relu});
  EXPECT_EQ(second.deferred_write(), nullptr);
}

TEST(BatchNormDeferred, NothingIsDeferredWithoutGradMode) {
  Inputs a = inputs(true);
  autograd::NoGradGuard no_grad;
  Tensor y =
      F::batch_norm(a.z, a.gamma, a.beta, Tensor(), Tensor(), {.activation = Activation::relu});
  EXPECT_EQ(y.deferred_write(), nullptr);
}

TEST(BatchNormDeferred, AnOutputWhoseWeightChangedRefusesToBeRead) {
  Inputs a = inputs(true);
  Tensor y =
      F::batch_norm(a.z, a.gamma, a.beta, Tensor(), Tensor(), {.activation = Activation::relu});
  {
    autograd::NoGradGuard no_grad;
    copy_(a.gamma, full({6}, 2.0));  // as an optimizer step would, before y was read
  }
  expect_changed_input_error([&] { y.to_vector(); }, "batch_norm", "weight");
}

TEST(BatchNormDeferred, AResidualAddSumsAnUnwrittenOutputAsTheWrittenOneBitForBit) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (Activation act : {Activation::identity, Activation::relu6}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " act " << static_cast<int>(act));
      Inputs a = inputs(true), b = inputs(false);
      // The residual: another batch norm's output, so that the sum has a recipe to recompute.
      Tensor r = F::batch_norm(a.z.to(dtype) * 2.0, a.gamma, a.beta, Tensor(), Tensor(),
                               {.activation = Activation::relu});
      Tensor y =
          F::batch_norm(a.z.to(dtype), a.gamma, a.beta, Tensor(), Tensor(), {.activation = act});
      ASSERT_NE(y.deferred_write(), nullptr);
      Tensor sum = add(r, y), swapped = add(y, r);
      EXPECT_NE(y.deferred_write(), nullptr) << "the add read z, not y";
      Tensor written =
          F::batch_norm(b.z.to(dtype), b.gamma, b.beta, Tensor(), Tensor(), {.activation = act});
      ASSERT_EQ(written.deferred_write(), nullptr);
      const std::vector<double> expected = add(r.detach(), written).to_vector();
      EXPECT_EQ(sum.to_vector(), expected);
      EXPECT_EQ(swapped.to_vector(), expected);
      // Backward's recompute of the sum (Note [Recomputed residual sums]) sums the same way.
      autograd::SavedTensor saved(sum);
      ASSERT_TRUE(saved.is_recipe());
      EXPECT_EQ(saved.unpack("test").to_vector(), expected);
      EXPECT_EQ(y.to_vector(), written.to_vector()) << "y itself, read at last";
    }
  }
}

TEST(BatchNormDeferred, AnAddOfAnOutputWithItselfReadsItOnce) {
  // The sum's other operand is the deferred output: reading it runs the very write the add
  // asked for the sum (the add holds it meanwhile).
  Inputs a = inputs(true), b = inputs(false);
  Tensor y = F::batch_norm(a.z, a.gamma, a.beta, Tensor(), Tensor(), {});
  Tensor written = F::batch_norm(b.z, b.gamma, b.beta, Tensor(), Tensor(), {});
  EXPECT_EQ(add(y, y).to_vector(), add(written, written).to_vector());
}

TEST(BatchNormDeferred, AnAddRefusesAnOutputWhoseInputChanged) {
  Inputs a = inputs(true);
  Tensor y = F::batch_norm(a.z, a.gamma, a.beta, Tensor(), Tensor(), {});
  {
    autograd::NoGradGuard no_grad;
    copy_(a.beta, full({6}, 2.0));
  }
  expect_changed_input_error([&] { add(a.z.detach(), y); }, "add", "bias");
}
