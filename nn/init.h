// Parameter initialisers with PyTorch's formulas (torch.nn.init), drawing from a Generator.
#pragma once

#include "core/factory.h"

namespace frugal::nn::init {

// PyTorch's default for Conv2d/Linear weights: kaiming_uniform_(a=sqrt(5)), i.e.
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)); also the default bias bound.
void default_uniform_(const Tensor& t, int64_t fan_in, Generator& gen = default_generator());
void uniform_(const Tensor& t, double lo, double hi, Generator& gen = default_generator());
void normal_(const Tensor& t, double mean, double stddev, Generator& gen = default_generator());
// kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, sqrt(2 / fan_out)).
void kaiming_normal_fan_out_(const Tensor& t, int64_t fan_out,
                             Generator& gen = default_generator());
void constant_(const Tensor& t, double value);

}  // namespace frugal::nn::init
