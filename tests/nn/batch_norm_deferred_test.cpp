// A training batch norm defers writing its output (Note [Deferred writes] in core/tensor.h, Note
// [Batch norm inside the depthwise convolution] in kernels/conv.h): the output read later holds
// the values an immediate write gives, bit for bit; only relu and relu6 outputs of inputs without
// a recipe are deferred, and nothing without gradients; a deferred output whose inputs were
// changed in place refuses to be read. (Backward writing an
// output still held, unread, is in tests/gpu/bn_input_conv_gpu_test.cpp: only a CUDA depthwise
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

}  // namespace

TEST(BatchNormDeferred, TheOutputReadLaterIsTheImmediateOneBitForBit) {
  for (Activation act : {Activation::relu, Activation::relu6}) {
    Inputs a = inputs(true), b = inputs(false);
    Tensor deferred = F::batch_norm(a.z, a.gamma, a.beta, Tensor(), Tensor(), {.activation = act});
    Tensor immediate = F::batch_norm(b.z, b.gamma, b.beta, Tensor(), Tensor(), {.activation = act});
    EXPECT_NE(deferred.deferred_write(), nullptr);
    EXPECT_EQ(immediate.deferred_write(), nullptr) << "nothing needs gradients: written at once";
    EXPECT_EQ(deferred.to_vector(), immediate.to_vector());
  }
}

TEST(BatchNormDeferred, OnlyWhatADepthwiseConvCouldReadIsDeferred) {
  // Activations no depthwise kernel applies in its loads: the reader writes it anyway.
  for (Activation act : {Activation::silu, Activation::hardswish, Activation::identity}) {
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
  try {
    y.to_vector();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("batch_norm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("modified in place"), std::string::npos) << msg;
  }
}
