// How a run wraps its model (data parallelism), for the dry runs on meta that predict or plan its
// step: the dry run's model is wrapped the same way, over a group that moves nothing
// (dist::MetaGroup), so that what the wrapper allocates (gradient buckets) is counted.
#pragma once

#include <functional>
#include <memory>

#include "nn/module.h"

namespace frugal::train {

using ModelWrapper = std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>)>;

}  // namespace frugal::train
