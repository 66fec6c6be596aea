// A checkpoint load with an out-of-memory error at each allocation on the model's device in turn
// (memory::InjectOom), for the CPU test on meta and the GPU test on the device: each failed load
// leaves the model as `state_of` reads it and no momentum in the optimizer, and stays an
// OutOfMemoryError; the sweep ends with a load that no error reached.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memory/oom_injection.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"

namespace frugal::test {

// `make` builds the model on `device` afresh for each load; `state_of` is what a failed load must
// not change (values on a device, version counters on meta, which has no values).
inline void expect_every_oom_of_a_load_changes_nothing(
    const std::string& path, Device device,
    const std::function<std::shared_ptr<nn::Module>()>& make, const optim::SgdOptions& sgd,
    const std::function<std::vector<std::string>(const nn::Module&)>& state_of) {
  bool loaded = false;
  for (int64_t nth = 0; nth < 100 && !loaded; ++nth) {
    SCOPED_TRACE(nth);
    std::shared_ptr<nn::Module> m = make();
    optim::SGD opt(m->parameters(), sgd);
    const std::vector<std::string> before = state_of(*m);
    memory::InjectOom fail(device, nth);
    try {
      train::load_checkpoint(path, *m, &opt);
      EXPECT_FALSE(fail.fired());
      loaded = true;
    } catch (const OutOfMemoryError&) {
      EXPECT_TRUE(fail.fired());
      EXPECT_EQ(state_of(*m), before) << "a parameter was written";
      for (const auto& [name, t] : opt.state_dict()) {  // "lr" only: no momentum loaded
        EXPECT_EQ(name.find("momentum_buffer"), std::string::npos) << "the optimizer was loaded";
      }
    }
  }
  EXPECT_TRUE(loaded);
}

}  // namespace frugal::test
