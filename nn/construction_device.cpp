// The thread's construction device (Note [Building modules on the meta device]).
#include "nn/construction_device.h"

namespace frugal::nn {
namespace {

thread_local Device t_construction_device = Device::cpu();

}  // namespace

ConstructionDeviceGuard::ConstructionDeviceGuard(Device device)
    : set_(t_construction_device, device) {}

Device construction_device() { return t_construction_device; }

}  // namespace frugal::nn
