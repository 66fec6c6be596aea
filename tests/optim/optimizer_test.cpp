// Optimizers against hand-computed updates, state round trips, failed steps that lose nothing,
// and learning-rate schedules.
#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/factory.h"
#include "core/ops.h"
#include "optim/lr_schedule.h"
#include "optim/state_io.h"

using namespace frugal;

namespace {

Tensor param(double v) { return full({1}, v, {.requires_grad = true}); }
void set_grad(Tensor& p, double g) { p.set_grad(full({1}, g)); }

}  // namespace

TEST(SGD, MomentumDampeningWeightDecayOverThreeSteps) {
  Tensor p = param(1.0);
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.01});
  double w = 1.0, buf = 0;
  const double grads[] = {0.5, -0.25, 1.0};
  for (int t = 0; t < 3; ++t) {
    set_grad(p, grads[t]);
    opt.step();
    double g = grads[t] + 0.01 * w;
    buf = t == 0 ? g : 0.9 * buf + 0.5 * g;  // the first step takes the gradient undamped
    w -= 0.1 * buf;
    EXPECT_NEAR(p.item(), w, 1e-6) << "step " << t;
  }
}

TEST(SGD, Nesterov) {
  Tensor p = param(2.0);
  optim::SGD opt({p}, {.lr = 0.05, .momentum = 0.8, .nesterov = true});
  double w = 2.0, buf = 0;
  for (int t = 0; t < 3; ++t) {
    double g = 0.3 * (t + 1);
    set_grad(p, g);
    opt.step();
    buf = t == 0 ? g : 0.8 * buf + g;
    w -= 0.05 * (g + 0.8 * buf);
    EXPECT_NEAR(p.item(), w, 1e-6);
  }
}

// SGD updates its parameters in batches (one per device and kind of step): a parameter that
// gets its first gradient late starts its momentum then, while the others carry theirs, and a
// parameter without a gradient is left alone.
TEST(SGD, ParametersJoiningLateStartTheirOwnMomentum) {
  Tensor a = param(1.0), b = param(-1.0), c = param(3.0);
  optim::SGD opt({a, b, c}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, 0.5);
  opt.step();  // a: first step; b, c: no gradient
  double wa = 1.0 - 0.1 * 0.5, buf_a = 0.5;
  EXPECT_NEAR(a.item(), wa, 1e-6);
  EXPECT_EQ(b.item(), -1.0);
  set_grad(a, 0.2);
  set_grad(b, 0.4);
  opt.step();  // a: momentum step; b: first step; c: still none
  buf_a = 0.9 * buf_a + 0.2;
  wa -= 0.1 * buf_a;
  EXPECT_NEAR(a.item(), wa, 1e-6);
  EXPECT_NEAR(b.item(), -1.0 - 0.1 * 0.4, 1e-6);
  EXPECT_EQ(c.item(), 3.0);
}

TEST(AdamW, BiasCorrectionAndDecoupledDecay) {
  Tensor p = param(1.0);
  optim::AdamW opt({p},
                   {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
  double w = 1.0, m = 0, v = 0;
  const double grads[] = {0.2, -0.1, 0.4};
  for (int t = 1; t <= 3; ++t) {
    double g = grads[t - 1];
    set_grad(p, g);
    opt.step();
    w *= 1 - 0.01 * 0.1;
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    double mh = m / (1 - std::pow(0.9, t)), vh = v / (1 - std::pow(0.999, t));
    w -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    EXPECT_NEAR(p.item(), w, 1e-6) << "step " << t;
  }
}

TEST(Optimizer, FailedStepLeavesWeightsAndStateIntact) {
  Tensor a = param(1.0), b = full({2}, 1.0, {.requires_grad = true});
  optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, 1.0);
  b.set_grad(full({2}, 1.0));
  opt.step();
  auto state_before = opt.state_dict();
  double a_before = a.item();
  std::vector<double> b_before = b.to_vector();
  set_grad(a, 1.0);
  b.impl().grad = full({2}, 1.0, {.dtype = DType::f16}).impl_ptr();  // a bad gradient
  try {
    opt.step();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gradient [2] f16 cpu of parameter 1"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(a.item(), a_before);  // parameter 0 came first and was still not touched
  EXPECT_EQ(b.to_vector(), b_before);
  auto state_after = opt.state_dict();
  ASSERT_EQ(state_after.size(), state_before.size());
  for (size_t i = 0; i < state_after.size(); ++i) {
    EXPECT_EQ(state_after[i].second.to_vector(), state_before[i].second.to_vector());
  }
}

TEST(Optimizer, StateDictRoundTripResumesIdentically) {
  auto run = [](optim::AdamW& opt, Tensor& p, int steps) {
    for (int t = 0; t < steps; ++t) {
      p.set_grad(full({3}, 0.1 * (t + 1)));
      opt.step();
    }
  };
  Tensor p1 = full({3}, 1.0, {.requires_grad = true});
  optim::AdamW o1({p1}, {});
  run(o1, p1, 2);
  Tensor p2 = p1.detach().clone().requires_grad_();
  optim::AdamW o2({p2}, {.lr = 0.5});
  o2.load_state_dict(o1.state_dict());
  EXPECT_DOUBLE_EQ(o2.lr(), 1e-3);
  run(o1, p1, 2);
  run(o2, p2, 2);
  EXPECT_EQ(p1.to_vector(), p2.to_vector());
  // A state with an extra tensor is rejected naming it, and nothing changes.
  auto bad = o1.state_dict();
  bad.emplace_back("state.9.exp_avg", zeros({3}));
  try {
    o2.load_state_dict(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected entry 'state.9.exp_avg'"), std::string::npos);
  }
}

// A state no run could have saved is refused before anything changes: the next step would
// otherwise update some parameters and then throw (a negative step count), or write NaN (a step
// count of 0 divides by 1 - beta^0, a negative second moment has no square root).
TEST(Optimizer, ALoadedStateTheKernelsCannotUseIsRefused) {
  Tensor a = param(1.0), b = param(1.0);
  optim::AdamW opt({a, b}, {.lr = 0.1});
  set_grad(a, 0.5), set_grad(b, 0.5);
  opt.step();
  const optim::NamedTensors good = opt.state_dict();
  auto with = [&](const std::string& entry, const Tensor& value) {
    optim::NamedTensors st = good;
    for (auto& [name, t] : st)
      if (name == entry) t = value;
    return st;
  };
  for (const optim::NamedTensors& bad :
       {with("state.1.step", optim::scalar_tensor(-1.0)),
        with("state.1.step", optim::scalar_tensor(0.5)),
        with("state.0.exp_avg_sq", full({1}, -4.0)), with("lr", optim::scalar_tensor(-0.5)),
        with("lr", optim::scalar_tensor(INFINITY))}) {
    EXPECT_THROW(opt.load_state_dict(bad), Error);
  }
  EXPECT_EQ(opt.lr(), 0.1);
  for (const auto& [name, t] : opt.state_dict()) {
    if (name.find(".step") != std::string::npos) {
      EXPECT_EQ(t.item(), 1.0) << name;
    }
  }
  EXPECT_THROW(opt.set_lr(-1.0), Error);
  EXPECT_THROW(opt.set_lr(NAN), Error);
  EXPECT_EQ(opt.lr(), 0.1);
}

TEST(Optimizer, FoundInfFlagSkipsTheUpdate) {
  Tensor p = param(1.0);
  optim::SGD opt({p}, {.lr = 0.1});
  Tensor flag = full({}, 1.0);
  opt.set_found_inf(flag);
  set_grad(p, 5.0);
  opt.step();
  EXPECT_EQ(p.item(), 1.0);
  fill_(flag, 0.0);
  opt.step();
  EXPECT_NEAR(p.item(), 0.5, 1e-7);
}

TEST(LrSchedule, StepAndCosineWithWarmup) {
  Tensor p = param(0.0);
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR step(opt, 2, 0.5);
  EXPECT_DOUBLE_EQ(step.lr_at(1), 1.0);
  EXPECT_DOUBLE_EQ(step.lr_at(2), 0.5);
  EXPECT_DOUBLE_EQ(step.lr_at(5), 0.25);
  step.step();
  step.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5);

  optim::SGD opt2({param(0.0)}, {.lr = 0.4});
  optim::CosineWarmup cos(opt2, {.warmup_steps = 4, .total_steps = 14, .min_lr = 0.0});
  EXPECT_DOUBLE_EQ(opt2.lr(), 0.1);  // warm-up starts at base / warmup_steps
  EXPECT_DOUBLE_EQ(cos.lr_at(3), 0.4);
  EXPECT_DOUBLE_EQ(cos.lr_at(4), 0.4);
  EXPECT_NEAR(cos.lr_at(9), 0.2, 1e-12);
  EXPECT_NEAR(cos.lr_at(14), 0.0, 1e-12);
}

// A resume jumps the schedule to the saved step: the same learning rate as stepping there, and
// a step count of 9e18 (a corrupt or hostile checkpoint) returns at once instead of looping.
TEST(LrSchedule, JumpToEqualsSteppingAndHandlesHugeSteps) {
  for (int64_t n : {0, 1, 3, 4, 9, 14, 20}) {
    optim::SGD stepped_opt({param(0.0)}, {.lr = 0.4}), jumped_opt({param(0.0)}, {.lr = 0.4});
    optim::CosineWarmup stepped(stepped_opt, {.warmup_steps = 4, .total_steps = 14});
    optim::CosineWarmup jumped(jumped_opt, {.warmup_steps = 4, .total_steps = 14});
    for (int64_t s = 0; s < n; ++s) stepped.step();
    jumped.jump_to(n);
    EXPECT_EQ(jumped_opt.lr(), stepped_opt.lr()) << n;
    EXPECT_EQ(jumped.current_step(), n);
  }
  optim::SGD opt({param(0.0)}, {.lr = 1.0});
  optim::StepLR step_lr(opt, 3, 0.5);
  step_lr.jump_to(9'000'000'000'000'000'000);
  EXPECT_EQ(opt.lr(), 0.0);
  EXPECT_THROW(step_lr.jump_to(-1), Error);
}

// Note [Learning rate on the device]: after keep_lr_on_device the kernels read the learning rate
// from a tensor that set_lr and load_state_dict keep current (on the CPU a host scalar).
TEST(Optimizer, LearningRateKeptOnTheDeviceFollowsSetLrAndLoads) {
  Tensor a = param(1.0), b = param(1.0);
  optim::SGD by_value({a}, {.lr = 0.1, .momentum = 0.9});
  optim::SGD on_device({b}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_FALSE(on_device.lr_on_device().defined());
  on_device.keep_lr_on_device(Device::cpu());
  ASSERT_TRUE(on_device.lr_on_device().defined());
  EXPECT_EQ(on_device.lr_on_device().dtype(), DType::f32);
  const double lrs[] = {0.1, 0.5, 0.25};
  for (double lr : lrs) {
    by_value.set_lr(lr);
    on_device.set_lr(lr);
    EXPECT_EQ(on_device.lr_on_device().item(), static_cast<double>(static_cast<float>(lr)));
    set_grad(a, 0.2);
    set_grad(b, 0.2);
    by_value.step();
    on_device.step();
    EXPECT_EQ(b.item(), a.item()) << "lr " << lr;  // SGD uses f32(lr) either way
  }
  EXPECT_NE(a.item(), 1.0 - 0.1 * 0.2 * 3);  // the set_lr calls took effect
  optim::NamedTensors state = by_value.state_dict();
  ASSERT_EQ(state[0].first, "lr");
  state[0].second = optim::scalar_tensor(0.125);
  on_device.load_state_dict(state);
  EXPECT_EQ(on_device.lr_on_device().item(), 0.125);
}

TEST(AdamW, LearningRateOnTheDeviceIsItsF32Value) {
  const float lr32 = static_cast<float>(0.003);
  Tensor a = param(1.0), b = param(1.0);
  optim::AdamW by_value({a}, {.lr = static_cast<double>(lr32), .weight_decay = 0.1});
  optim::AdamW on_device({b}, {.lr = 0.003, .weight_decay = 0.1});
  on_device.keep_lr_on_device(Device::cpu());
  for (double g : {0.2, -0.1, 0.4}) {
    set_grad(a, g);
    set_grad(b, g);
    by_value.step();
    on_device.step();
    EXPECT_EQ(b.item(), a.item());
  }
}

// Loaded state is made afresh (in one allocation per kind on CUDA, Note [Flat resident
// tensors]) and filled from the state dict, never an alias of it: stepping leaves the dict as it
// was, and a parameter without state in the dict gets none.
TEST(Optimizer, LoadedStateIsACopyOfTheDict) {
  Tensor a = param(1.0), b = param(2.0);
  optim::SGD o1({a, b}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, 1.0);
  o1.step();  // only `a` has a gradient: only `a` has momentum
  optim::NamedTensors dict = o1.state_dict();
  const std::vector<double> saved = dict.back().second.to_vector();
  Tensor a2 = param(1.0), b2 = param(2.0);
  optim::SGD o2({a2, b2}, {.lr = 0.1, .momentum = 0.9});
  o2.load_state_dict(dict);
  ASSERT_EQ(o2.state_tensors().size(), 1u);
  EXPECT_EQ(o2.state_tensors()[0].to_vector(), saved);
  set_grad(a2, 3.0);
  o2.step();
  EXPECT_EQ(dict.back().second.to_vector(), saved);
  EXPECT_NE(o2.state_tensors()[0].to_vector(), saved);
}
