// The public API in one include, for projects that use frugal as a library (installed under
// include/frugal/ by `cmake --install`; examples/consumer shows find_package(frugal)). Every
// header below can also be included on its own, with the same paths as in this tree.
#pragma once

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "data/transforms.h"
#include "memory/allocator.h"
#include "memory/events.h"
#include "models/registry.h"
#include "nn/checkpoint.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/captured_step.h"
#include "train/checkpoint.h"
#include "train/saved_estimate.h"
#include "train/trainer.h"
