// Initialisers: draw a fresh tensor and copy it into the parameter in place.
#include "nn/init.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace frugal::nn::init {

void uniform_(const Tensor& t, double lo, double hi, Generator& gen) {
  autograd::NoGradGuard ng;
  copy_(t, rand(t.shape(), gen, {t.dtype(), t.device()}, lo, hi));
}

void normal_(const Tensor& t, double mean, double stddev, Generator& gen) {
  autograd::NoGradGuard ng;
  copy_(t, randn(t.shape(), gen, {t.dtype(), t.device()}, mean, stddev));
}

void default_uniform_(const Tensor& t, int64_t fan_in, Generator& gen) {
  double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  uniform_(t, -bound, bound, gen);
}

void kaiming_normal_fan_out_(const Tensor& t, int64_t fan_out, Generator& gen) {
  normal_(t, 0.0, std::sqrt(2.0 / static_cast<double>(std::max<int64_t>(fan_out, 1))), gen);
}

void constant_(const Tensor& t, double value) {
  autograd::NoGradGuard ng;
  fill_(t, value);
}

}  // namespace frugal::nn::init
