// load_checkpoint into a model on the device, with an out-of-memory error at each device
// allocation of the load in turn (memory::InjectOom): the model and the optimizer stay as they
// were and the error stays an OutOfMemoryError. The file's tensors go to the device before
// anything is changed; copied one at a time at the end, a failed copy left the optimizer loaded
// and the first tensors overwritten. tests/train/checkpoint_test.cpp does the same on meta.
#include <gtest/gtest.h>

#include "core/factory.h"
#include "gpu_test_util.h"
#include "memory/oom_injection.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/file_test_util.h"

using namespace frugal;

namespace {

const Device kGpu = Device::cuda(0);

std::shared_ptr<nn::Sequential> tiny_model(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3), std::make_shared<nn::Linear>(4, 3)});
}

}  // namespace

TEST(CheckpointGpu, RunningOutOfDeviceMemoryAtAnyAllocationOfALoadChangesNothing) {
  SKIP_WITHOUT_GPU();
  test::ScratchFile f("ckpt_gpu_oom.safetensors");
  {
    auto a = tiny_model(1);
    optim::SGD opt(a->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (Tensor& p : a->parameters()) p.set_grad(ones(p.shape()));
    opt.step();
    train::save_checkpoint(f.path(), *a, &opt, {.epoch = 1, .step = 1});
  }
  bool loaded = false;
  for (int64_t nth = 0; nth < 100 && !loaded; ++nth) {
    SCOPED_TRACE(nth);
    auto m = tiny_model(2);
    m->to(kGpu);
    optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
    const std::vector<std::string> before = test::snapshot(m->named_parameters());
    memory::InjectOom fail(kGpu, nth);
    try {
      train::load_checkpoint(f.path(), *m, &opt);
      EXPECT_FALSE(fail.fired());
      loaded = true;
    } catch (const OutOfMemoryError&) {
      EXPECT_TRUE(fail.fired());
      EXPECT_EQ(test::snapshot(m->named_parameters()), before) << "a parameter was written";
      for (const auto& [name, t] : opt.state_dict()) {  // "lr" only: no momentum loaded
        EXPECT_EQ(name.find("momentum_buffer"), std::string::npos) << "the optimizer was loaded";
      }
    }
  }
  EXPECT_TRUE(loaded);
}
