// The write a training batch norm defers (Note [Deferred writes] in core/tensor.h): its output
// act(bn(z)) is allocated with the statistics computed, and written on its first read, unless a
// depthwise convolution takes z and the statistics instead (Note [Batch norm inside the
// depthwise convolution] in kernels/conv.h).
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
