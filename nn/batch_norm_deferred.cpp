// The deferred write of a training batch norm's output (nn/batch_norm_deferred.h).
#include "nn/batch_norm_deferred.h"

#include <algorithm>

#include "core/op_util.h"
#include "kernels/batch_norm.h"

namespace frugal::nn {
namespace {

uint64_t version_or_zero(const Tensor& t) { return t.defined() ? t.version() : 0; }

}  // namespace

DeferredBatchNormAct::DeferredBatchNormAct(Activation act, Tensor z, Tensor gamma, Tensor beta,
                                           Tensor mean, Tensor invstd)
    : act_(act),
      z_(std::move(z)),
      gamma_(std::move(gamma)),
      beta_(std::move(beta)),
      mean_(std::move(mean)),
      invstd_(std::move(invstd)),
      z_version_(z_.version()),
      gamma_version_(version_or_zero(gamma_)),
      beta_version_(version_or_zero(beta_)) {}

kernels::BnActInput DeferredBatchNormAct::input(const char* op) const {
  auto check = [&](const Tensor& t, uint64_t saw, const char* what) {
    FRUGAL_CHECK(!t.defined() || t.version() == saw, op, ": the batch norm output it reads was ",
                 "never written, and its ", what, " ", describe(t),
                 " has been modified in place since the batch norm ran (version ", saw, " -> ",
                 t.version(), "); read the output before changing its inputs");
  };
  check(z_, z_version_, "input");
  check(gamma_, gamma_version_, "weight");
  check(beta_, beta_version_, "bias");
  return {act_, mean_.data_ptr(), invstd_.data_ptr(), detail::data_or_null(gamma_),
          detail::data_or_null(beta_)};
}

bool DeferredBatchNormAct::write_sum(const Tensor& other, void* out) const {
  if (other.shape() != z_.shape() || other.dtype() != z_.dtype() || other.device() != z_.device()) {
    return false;
  }
  const kernels::BnActInput in = input("add (summing a batch norm output never written)");
  const int64_t c = z_.size(-1), rows = z_.numel() / std::max<int64_t>(c, 1);
  kernels::batch_norm_act_apply_add(detail::ctx_of(z_), z_.dtype(), act_, rows, c, z_.data_ptr(),
                                    in.gamma, in.beta, in.mean, in.invstd, other.data_ptr(), out);
  return true;
}

void DeferredBatchNormAct::write(void* out) const {
  const kernels::BnActInput in = input("batch_norm (writing its output on first read)");
  const int64_t c = z_.size(-1), rows = z_.numel() / std::max<int64_t>(c, 1);
  kernels::batch_norm_act_apply(detail::ctx_of(z_), z_.dtype(), act_, rows, c, z_.data_ptr(),
                                in.gamma, in.beta, in.mean, in.invstd, out);
}

}  // namespace frugal::nn
