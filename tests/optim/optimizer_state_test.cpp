// Optimizer state as PyTorch's load_state_dict keeps it: the parameter count is checked, the
// hyper-parameters travel with the state, a schedule made after a load starts from the run's
// first learning rate, and a schedule or step that fails changes nothing.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error_of.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "optim/state_io.h"

using namespace frugal;
using frugal::test::error_of;

namespace {

Tensor param(double v) { return full({1}, v, {.requires_grad = true}); }

optim::NamedTensors without(optim::NamedTensors st, const std::string& entry) {
  std::erase_if(st, [&](const auto& e) { return e.first == entry; });
  return st;
}

}  // namespace

// PyTorch: "loaded state dict contains a parameter group that doesn't match the size of
// optimizer's group". A state of one parameter would otherwise load into three, silently, as
// long as it holds no per-parameter entry (SGD without momentum, AdamW before its first step).
TEST(OptimizerState, AStateForAnotherNumberOfParametersIsRefused) {
  optim::SGD one({param(1.0)}, {.lr = 0.5});
  optim::SGD three({param(1.0), param(1.0), param(1.0)}, {.lr = 0.1});
  EXPECT_NE(error_of([&] {
              three.load_state_dict(one.state_dict());
            }).find("saved for 1 parameters, but this optimizer has 3"),
            std::string::npos);
  EXPECT_EQ(three.lr(), 0.1);
  optim::AdamW adam_one({param(1.0)}, {});
  optim::AdamW adam_three({param(1.0), param(1.0), param(1.0)}, {});
  EXPECT_THROW(adam_three.load_state_dict(adam_one.state_dict()), Error);
  // Another kind's state lacks this kind's hyper-parameters.
  optim::AdamW adam_single({param(1.0)}, {.lr = 0.1});
  EXPECT_NE(error_of([&] {
              adam_single.load_state_dict(one.state_dict());
            }).find("missing entry 'beta1'"),
            std::string::npos);
  EXPECT_EQ(adam_single.lr(), 0.1);
}

// The saved hyper-parameters replace the optimizer's own, as in PyTorch; the next steps of a
// momentum-0 SGD that loaded a momentum-0.9 state are the saving optimizer's next steps.
TEST(OptimizerState, HyperParametersTravelWithTheState) {
  Tensor a = param(1.0), b = param(1.0);
  optim::SGD saver(
      {a}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.0, .weight_decay = 0.01, .nesterov = true});
  optim::SGD loader({b}, {.lr = 0.3});
  a.set_grad(full({1}, 0.5));
  saver.step();
  loader.load_state_dict(saver.state_dict());
  EXPECT_EQ(loader.options().momentum, 0.9);
  EXPECT_EQ(loader.options().weight_decay, 0.01);
  EXPECT_TRUE(loader.options().nesterov);
  {
    autograd::NoGradGuard no_grad;
    copy_(b, a.detach());
  }
  for (int t = 0; t < 3; ++t) {
    a.set_grad(full({1}, 0.25 * t));
    b.set_grad(full({1}, 0.25 * t));
    saver.step();
    loader.step();
    EXPECT_EQ(b.item(), a.item()) << t;
  }
  optim::AdamW adam_saver({param(1.0)},
                          {.beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.0});
  optim::AdamW adam_loader({param(1.0)}, {});
  adam_loader.load_state_dict(adam_saver.state_dict());
  EXPECT_EQ(adam_loader.options().beta1, 0.8);
  EXPECT_EQ(adam_loader.options().beta2, 0.95);
  EXPECT_EQ(adam_loader.options().eps, 1e-6);
  EXPECT_EQ(adam_loader.options().weight_decay, 0.0);
}

// Saved hyper-parameters the constructor would refuse are refused, before anything changes;
// state saved before the entries existed (no "param_count") keeps the optimizer's own.
TEST(OptimizerState, BadHyperParametersAreRefusedAndOldStateKeepsTheOptimizers) {
  optim::SGD sgd({param(1.0)}, {.lr = 0.1, .momentum = 0.5});
  optim::NamedTensors st = sgd.state_dict();
  for (auto& [name, t] : st) {
    if (name == "momentum") t = optim::scalar_tensor(NAN);
  }
  EXPECT_NE(error_of([&] { sgd.load_state_dict(st); }).find("sgd state: momentum"),
            std::string::npos);
  EXPECT_EQ(sgd.options().momentum, 0.5);

  optim::SGD saver({param(1.0)}, {.lr = 0.2, .momentum = 0.9});
  optim::NamedTensors old = saver.state_dict();
  for (const char* entry : {"param_count", "momentum", "dampening", "weight_decay", "nesterov"}) {
    old = without(old, entry);
  }
  sgd.load_state_dict(old);
  EXPECT_EQ(sgd.lr(), 0.2);
  EXPECT_EQ(sgd.options().momentum, 0.5);
  // Without "param_count" the hyper-parameters are not read, so an old state that has them is
  // one that no version saved.
  EXPECT_THROW(sgd.load_state_dict(without(saver.state_dict(), "param_count")), Error);
}

// A duplicated entry would be read once and the second copy dropped unseen.
TEST(OptimizerState, AnEntryThatAppearsTwiceIsRefused) {
  optim::SGD sgd({param(1.0)}, {.lr = 0.1});
  optim::NamedTensors st = sgd.state_dict();
  st.emplace_back("lr", optim::scalar_tensor(0.7));
  EXPECT_NE(error_of([&] { sgd.load_state_dict(st); }).find("'lr' appears twice"),
            std::string::npos);
  EXPECT_EQ(sgd.lr(), 0.1);
}

// PyTorch's param_group['initial_lr']: a second schedule on the same optimizer, or one made
// after the state of a decayed run was loaded, starts from the run's first rate.
TEST(OptimizerState, ASchedulesBaseIsTheRunsFirstRate) {
  optim::SGD opt({param(0.0)}, {.lr = 1.0});
  optim::StepLR first(opt, 2, 0.1);
  for (int t = 0; t < 3; ++t) first.step();
  EXPECT_NEAR(opt.lr(), 0.1, 1e-15);
  optim::StepLR second(opt, 2, 0.1);
  EXPECT_EQ(second.base_lr(), 1.0);

  optim::SGD resumed({param(0.0)}, {.lr = 1.0});
  resumed.load_state_dict(opt.state_dict());
  optim::StepLR resumed_schedule(resumed, 2, 0.1);
  resumed_schedule.jump_to(3);
  EXPECT_NEAR(resumed.lr(), 0.1, 1e-15);  // not 0.01: the decay is not applied twice

  optim::SGD warm({param(0.0)}, {.lr = 0.4});
  optim::CosineWarmup a(warm, {.warmup_steps = 4, .total_steps = 10});
  optim::CosineWarmup b(warm, {.warmup_steps = 4, .total_steps = 10});
  b.jump_to(5);
  EXPECT_EQ(b.base_lr(), 0.4);
  EXPECT_NEAR(warm.lr(), a.lr_at(5), 1e-15);
}

// Settings that would make a rate negative or NaN are refused when the schedule is made, not
// hours into the run; and a rate the optimizer refuses leaves the step count where it was.
TEST(OptimizerState, ScheduleSettingsAreCheckedUpFrontAndAFailedStepMovesNothing) {
  optim::SGD opt({param(0.0)}, {.lr = 0.1});
  EXPECT_THROW(optim::StepLR(opt, 2, -0.5), Error);
  EXPECT_THROW(optim::StepLR(opt, 2, NAN), Error);
  EXPECT_THROW(optim::CosineWarmup(opt, {.warmup_steps = 0, .total_steps = 10, .min_lr = -0.01}),
               Error);
  EXPECT_THROW(optim::CosineWarmup(opt, {.warmup_steps = 0, .total_steps = 10, .min_lr = NAN}),
               Error);

  // A schedule whose rate overflows to infinity: set_lr refuses it.
  optim::SGD big({param(0.0)}, {.lr = 1e300});
  optim::StepLR growing(big, 1, 1e10);
  EXPECT_THROW(growing.step(), Error);
  EXPECT_EQ(growing.current_step(), 0);
  EXPECT_EQ(big.lr(), 1e300);
  EXPECT_THROW(growing.jump_to(2), Error);
  EXPECT_EQ(growing.current_step(), 0);
}

// AdamW refuses a weight decay torch.optim.AdamW refuses (NaN would turn every parameter into
// NaN at the first step, silently).
TEST(OptimizerState, AdamWRefusesANegativeOrNaNWeightDecay) {
  EXPECT_THROW(optim::AdamW({param(1.0)}, {.weight_decay = NAN}), Error);
  EXPECT_THROW(optim::AdamW({param(1.0)}, {.weight_decay = -1.0}), Error);
  EXPECT_THROW(optim::AdamW({param(1.0)}, {.eps = NAN}), Error);
}
