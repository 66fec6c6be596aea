// The device layers make their parameters and buffers on: the CPU, unless a
// ConstructionDeviceGuard on this thread names another (PyTorch: `with torch.device("meta")`).
//   nn::ConstructionDeviceGuard on_meta(Device::meta());
//   auto model = models::create("resnet18");  // shapes only: no bytes, no initial draws
#pragma once

#include "base/device.h"
#include "base/scoped_value.h"

namespace frugal::nn {

// Note [Building modules on the meta device]
// frugal estimate, the step planner's dry run and the budget search need a model's shapes, not
// its weights. Built on the CPU and then moved to meta, ResNet-18 allocated, zeroed and drew its
// 11.7M initial weights first: about 60% of a 0.9 s estimate on the 2-core CPU. Built on meta,
// its layers allocate nothing and their initialisers draw nothing; the random stream still
// advances by what the draws would have taken, so whatever the caller draws next is unchanged.
class ConstructionDeviceGuard {
 public:
  explicit ConstructionDeviceGuard(Device device);

 private:
  ScopedValue<Device> set_;  // Note [Scoped thread-local settings]
};

Device construction_device();

}  // namespace frugal::nn
