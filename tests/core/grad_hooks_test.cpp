#include "core/grad_hooks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/checkpoint.h"

namespace frugal {
namespace {

TEST(GradHooks, PostAccumulateHooksSeeTheGradientInBackwardOrderOncePerLeaf) {
  Tensor w1 = from_vector({2.0}, {1}, {.requires_grad = true});
  Tensor w2 = from_vector({3.0}, {1}, {.requires_grad = true});
  Tensor x = from_vector({5.0}, {1});
  std::vector<std::string> log;
  auto h1 = autograd::add_post_accumulate_grad_hook(w1, [&](const Tensor& leaf) {
    log.push_back("w1 grad " + std::to_string(leaf.grad().to_vector()[0]));
  });
  auto h2 = autograd::add_post_accumulate_grad_hook(w2, [&](const Tensor& leaf) {
    log.push_back("w2 grad " + std::to_string(leaf.grad().to_vector()[0]));
  });
  // y = (x * w1) * w2 + w1: w1 gets two gradients, summed before its one accumulation.
  Tensor y = add(mul(mul(x, w1), w2), w1);
  sum(y).backward();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0], "w2 grad " + std::to_string(10.0));  // the later op's leaf first
  EXPECT_EQ(log[1], "w1 grad " + std::to_string(16.0));  // x * w2 + 1

  h2.reset();  // removed: only w1's hook runs now
  log.clear();
  sum(add(mul(mul(x, w1), w2), w1)).backward();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "w1 grad " + std::to_string(32.0));  // accumulated onto the first
}

TEST(GradHooks, QueuedCallbacksRunOnceAfterTheOutermostBackward) {
  Tensor w = from_vector({2.0}, {1}, {.requires_grad = true});
  std::vector<std::string> log;
  EXPECT_FALSE(autograd::in_backward());
  auto h = autograd::add_post_accumulate_grad_hook(w, [&](const Tensor&) {
    log.push_back("hook");
    EXPECT_TRUE(autograd::in_backward());
    autograd::queue_callback([&] {
      EXPECT_FALSE(autograd::in_backward());
      log.push_back("callback");
    });
  });
  // A checkpointed segment runs a backward of its own inside this one: its leaf's hook queues
  // onto the outer backward, whose end is the step's.
  Tensor y =
      nn::checkpoint([&](const Tensor& x) { return mul(x, w); }, from_vector({3.0}, {1}), {w});
  mul(y, 2.0).backward();
  EXPECT_EQ(log, (std::vector<std::string>{"hook", "callback"}));

  try {
    autograd::queue_callback([] {});
    FAIL() << "queue_callback outside backward must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no backward is running"), std::string::npos);
  }
}

TEST(GradHooks, AFailedBackwardDropsItsCallbacksAndHooksNeedALeaf) {
  Tensor w = from_vector({2.0}, {1}, {.requires_grad = true});
  int ran = 0;
  auto h = autograd::add_post_accumulate_grad_hook(w, [&](const Tensor&) {
    autograd::queue_callback([&] { ++ran; });
    FRUGAL_FAIL("hook failure");
  });
  EXPECT_THROW(sum(mul(w, 3.0)).backward(), Error);
  EXPECT_EQ(ran, 0);
  EXPECT_FALSE(autograd::in_backward());

  Tensor not_leaf = mul(w, 2.0);
  EXPECT_THROW((void)autograd::add_post_accumulate_grad_hook(not_leaf, [](const Tensor&) {}),
               Error);
  EXPECT_THROW(
      (void)autograd::add_post_accumulate_grad_hook(from_vector({1.0}, {1}), [](const Tensor&) {}),
      Error);
}

// A hook whose handle outlives its tensor runs for no other tensor, not even one that takes the
// dead tensor's address (hooks were found by that address).
TEST(GradHooks, AHookOutlivingItsTensorRunsForNoOther) {
  int runs = 0;
  autograd::HookHandle handle;
  const void* old_address = nullptr;
  {
    Tensor w = full({4}, 1.0, {.requires_grad = true});
    old_address = w.impl_ptr().get();
    handle = autograd::add_post_accumulate_grad_hook(w, [&](const Tensor&) { ++runs; });
  }
  // Tensors like the dead one, all kept (each new one takes other freed memory first), until one
  // takes its address, which the hook's handle no longer lets happen; none runs the hook.
  std::vector<Tensor> tries;
  for (int i = 0; i < 200 && (tries.empty() || tries.back().impl_ptr().get() != old_address); ++i) {
    tries.push_back(full({4}, 1.0));
    tries.back().requires_grad_(true);
    sum(tries.back()).backward();
  }
  EXPECT_EQ(runs, 0);
}

}  // namespace
}  // namespace frugal
