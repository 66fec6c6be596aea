// Note [Building modules on the meta device]: a model built under a ConstructionDeviceGuard for
// meta has every parameter and buffer on meta with the shapes a CPU-built one has, takes no CPU
// bytes, and moves the random stream exactly as far as building it on the CPU does.
#include "nn/construction_device.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/factory.h"
#include "memory/allocator.h"
#include "models/registry.h"
#include "nn/layers.h"

using namespace frugal;

namespace {

std::map<std::string, Shape> shapes_of(nn::Module& m) {
  std::map<std::string, Shape> out;
  for (auto& [name, t] : m.named_parameters()) out[name] = t.shape();
  for (auto& [name, t] : m.named_buffers()) out[name] = t.shape();
  return out;
}

}  // namespace

TEST(ConstructionDevice, AModelBuiltOnMetaHoldsNoBytesAndDrawsWhatACpuBuildDraws) {
  for (const std::string name : {"resnet18", "efficientnet_b0"}) {
    SCOPED_TRACE(name);
    const models::ModelConfig config{.num_classes = 10};
    memory::Allocator& cpu = memory::cpu_allocator();
    default_generator().manual_seed(7);
    auto on_cpu = models::create(name, config);
    const uint64_t cpu_offset = default_generator().offset();

    default_generator().manual_seed(7);
    cpu.reset_peak_stats();
    const int64_t before = cpu.stats().allocated_bytes.current;
    std::shared_ptr<nn::Module> on_meta;
    {
      nn::ConstructionDeviceGuard guard(Device::meta());
      on_meta = models::create(name, config);
    }
    EXPECT_EQ(cpu.stats().allocated_bytes.peak, before) << "a meta build allocated CPU bytes";
    EXPECT_EQ(default_generator().offset(), cpu_offset);
    for (auto& [pname, t] : on_meta->named_parameters()) {
      EXPECT_TRUE(t.device().is_meta()) << pname;
      EXPECT_TRUE(t.requires_grad()) << pname;
    }
    for (auto& [bname, t] : on_meta->named_buffers()) EXPECT_TRUE(t.device().is_meta()) << bname;
    EXPECT_EQ(shapes_of(*on_meta), shapes_of(*on_cpu));
  }
}

TEST(ConstructionDevice, GuardsNestAndRestoreTheCpu) {
  EXPECT_EQ(nn::construction_device(), Device::cpu());
  {
    nn::ConstructionDeviceGuard outer(Device::meta());
    {
      nn::ConstructionDeviceGuard inner(Device::cpu());
      EXPECT_EQ(nn::construction_device(), Device::cpu());
      EXPECT_TRUE(nn::Conv2d(3, 8, 3).weight.device().is_cpu());
    }
    EXPECT_EQ(nn::construction_device(), Device::meta());
    EXPECT_TRUE(nn::BatchNorm2d(8).running_var.device().is_meta());
  }
  EXPECT_EQ(nn::construction_device(), Device::cpu());
}
