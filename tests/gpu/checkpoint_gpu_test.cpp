// load_checkpoint into a model on the device, with an out-of-memory error at each device
// allocation of the load in turn (memory::InjectOom): the model and the optimizer stay as they
// were and the error stays an OutOfMemoryError. The file's tensors go to the device before
// anything is changed; copied one at a time at the end, a failed copy left the optimizer loaded
// and the first tensors overwritten. tests/train/checkpoint_test.cpp does the same on meta.
#include <gtest/gtest.h>

#include "core/factory.h"
#include "gpu_test_util.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/file_test_util.h"
#include "train/load_oom_sweep.h"

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
  test::expect_every_oom_of_a_load_changes_nothing(
      f.path(), kGpu,
      [] {
        std::shared_ptr<nn::Module> m = tiny_model(2);
        m->to(kGpu);
        return m;
      },
      {.lr = 0.1, .momentum = 0.9},
      [](const nn::Module& m) { return test::snapshot(m.named_parameters()); });
}
