// The write a training batch norm defers (Note [Deferred writes] in core/tensor.h): its output
// act(bn(z)) is allocated with the statistics computed, and written on its first read, unless a
// depthwise convolution takes z and the statistics instead (Note [Batch norm inside the
// depthwise convolution] in kernels/conv.h), or a residual add does.
//
// Note [Residual sums of deferred batch norms]
// A residual block ends in x + bn(z) (MobileNetV2, EfficientNet and ResNet without their final
// activation; ResNet's downsample branch). Written first, bn(z) cost a pass that wrote it and a
// pass that read it back for the sum: 20 of MobileNetV2's 36 elementwise adds a step sat behind
// such a normalize, 10 in the forward and the rest in backward's recompute of the residual
// stream (Note [Recomputed residual sums] in core/ops_elementwise.cpp). The add now asks the
// owed write for the sum (DeferredWrite::write_sum): one pass reads z and x and writes the sum,
// batch_norm_act_apply_add, whose normalized value is rounded to the dtype before the add, so
// the sum is bit for bit the one the two passes gave. bn(z)'s own bytes stay unwritten, and are
// written should anything read them later. A batch norm without an activation defers for this,
// and so does the recompute of its output in backward, so that the recomputed sums fuse too.
#pragma once

#include "core/tensor.h"
#include "kernels/conv.h"

namespace frugal::nn {

using kernels::Activation;

class DeferredBatchNormAct final : public DeferredWrite {
 public:
  // gamma and beta may be undefined; mean and invstd are the saved statistics.
  DeferredBatchNormAct(Activation act, Tensor z, Tensor gamma, Tensor beta, Tensor mean,
                       Tensor invstd);

  // act((z - mean) * invstd * gamma + beta) into `out`, bit for bit the training forward's.
  void write(void* out) const override;
  // other + that value into `out` in one pass, for `other` of z's shape, dtype and device.
  bool write_sum(const Tensor& other, void* out) const override;

  Activation act() const { return act_; }
  const Tensor& z() const { return z_; }
  // The statistics as the conv kernels take them, after checking that z, gamma and beta were not
  // written in place since the batch norm ran (the output would no longer be the one promised);
  // `op` names the reader in the error.
  kernels::BnActInput input(const char* op) const;

 private:
  Activation act_;
  Tensor z_, gamma_, beta_, mean_, invstd_;
  uint64_t z_version_, gamma_version_, beta_version_;
};

}  // namespace frugal::nn
