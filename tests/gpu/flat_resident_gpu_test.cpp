// Note [Flat resident tensors] on the device: a model moved to CUDA takes one allocation for its
// parameters and buffers, and SGD and AdamW one per kind of state, each tensor at a 512-byte
// boundary of it, with the values the tensors had.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/factory.h"
#include "core/ops.h"
#include "gpu_test_util.h"
#include "memory/allocator.h"
#include "memory/rounding.h"
#include "models/registry.h"
#include "optim/optimizer.h"

using namespace frugal;

namespace {

const Device kGpu = Device::cuda(0);

int64_t gpu_allocations() { return memory::allocator_for(kGpu).stats().allocation.current; }

// Each tensor starts where the previous one's 512-byte-rounded bytes end.
void expect_packed(const std::vector<Tensor>& tensors) {
  for (size_t i = 1; i < tensors.size(); ++i) {
    const auto prev = reinterpret_cast<uintptr_t>(tensors[i - 1].data_ptr());
    const auto here = reinterpret_cast<uintptr_t>(tensors[i].data_ptr());
    EXPECT_EQ(here - prev, memory::round_request(tensors[i - 1].nbytes())) << "tensor " << i;
  }
}

}  // namespace

TEST(FlatResidentGpu, ModelsAndOptimizerStateTakeOneAllocationEach) {
  SKIP_WITHOUT_GPU();
  auto model = models::create("resnet18", {.num_classes = 10});
  std::vector<std::vector<double>> on_cpu;
  for (const auto& [name, p] : model->named_parameters()) on_cpu.push_back(p.to_vector());
  for (const auto& [name, b] : model->named_buffers()) on_cpu.push_back(b.to_vector());
  const int64_t before = gpu_allocations();
  model->to(kGpu);
  EXPECT_EQ(gpu_allocations(), before + 1);
  std::vector<Tensor> moved;
  for (const auto& [name, p] : model->named_parameters()) moved.push_back(p);
  for (const auto& [name, b] : model->named_buffers()) moved.push_back(b);
  expect_packed(moved);
  for (size_t i = 0; i < moved.size(); ++i) {
    EXPECT_EQ(moved[i].device(), kGpu);
    EXPECT_EQ(moved[i].to_vector(), on_cpu[i]) << "tensor " << i;
  }

  for (const bool sgd : {true, false}) {
    SCOPED_TRACE(sgd ? "sgd" : "adamw");
    std::unique_ptr<optim::Optimizer> opt;
    if (sgd) {
      opt = std::make_unique<optim::SGD>(model->parameters(),
                                         optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
    } else {
      opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 0.01});
    }
    for (Tensor p : model->parameters()) p.set_grad(ones_like(p));
    const int64_t with_grads = gpu_allocations();
    opt->step();
    // SGD's momentum in one allocation; AdamW's averages, squares and step counts in three.
    EXPECT_EQ(gpu_allocations(), with_grads + (sgd ? 1 : 3));
    // Each kind of state packed: SGD's momentum; AdamW's averages, squares, step counts.
    const std::vector<Tensor> state = opt->state_tensors();
    const size_t n = model->parameters().size();
    ASSERT_EQ(state.size(), sgd ? n : 3 * n);
    for (size_t kind = 0; kind < state.size() / n; ++kind) {
      expect_packed({state.begin() + kind * n, state.begin() + (kind + 1) * n});
    }
    if (sgd) {
      EXPECT_EQ(state[0].to_vector(), std::vector<double>(state[0].numel(), 1.0));
    }
    model->zero_grad();
  }
}
