// GradScaler's state machine, one test per transition (STYLE 7): scaling, fused unscale with the
// non-finite check, skipped steps that leave weights and optimizer state bit-identical, backoff
// and growth, misuse errors, the disabled scaler, AdamW's step count, and state round trips.
#include "optim/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/factory.h"
#include "core/ops.h"
#include "optim/optimizer.h"

using namespace frugal;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Raw bits of every element, so "unchanged" means bit-identical (NaN-safe, -0 vs +0 aware).
std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data<float>(), out.size() * 4);
  return out;
}

struct Model {
  Tensor a = from_vector({0.5, -1.25, 2.0, 0.75, -0.3}, Shape{5}, {.requires_grad = true});
  Tensor b = from_vector({1.5, -0.5, 0.25}, Shape{3}, {.requires_grad = true});
  std::vector<Tensor> params() const { return {a, b}; }
  // Gradients as a scaled backward would leave them: true gradient times `scale`.
  void set_grads(double scale, double step, double poison_b1 = 0) {
    std::vector<double> ga(5), gb(3);
    for (size_t i = 0; i < 5; ++i) ga[i] = scale * (0.1 * (i + 1) - 0.07 * step);
    for (size_t i = 0; i < 3; ++i) gb[i] = scale * (0.2 - 0.05 * i + 0.03 * step);
    if (poison_b1 != 0) gb[1] = poison_b1;
    a.set_grad(from_vector(ga, Shape{5}));
    b.set_grad(from_vector(gb, Shape{3}));
  }
};

}  // namespace

TEST(GradScaler, PyTorchDefaults) {
  optim::GradScaler s;
  EXPECT_EQ(s.options().init_scale, 65536.0);
  EXPECT_EQ(s.options().growth_factor, 2.0);
  EXPECT_EQ(s.options().backoff_factor, 0.5);
  EXPECT_EQ(s.options().growth_interval, 2000);
  EXPECT_TRUE(s.is_enabled());
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_THROW(optim::GradScaler({.backoff_factor = 1.5}), Error);
}

TEST(GradScaler, ScalerForGivesOneWithTheDefaultsToF16Only) {
  std::unique_ptr<optim::GradScaler> f16 = optim::scaler_for(DType::f16);
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->options().init_scale, 65536.0);
  EXPECT_TRUE(f16->is_enabled());
  EXPECT_EQ(optim::scaler_for(DType::f32), nullptr);
  EXPECT_EQ(optim::scaler_for(DType::bf16), nullptr);
}

TEST(GradScaler, ScaleMultipliesTheLossAndItsGradients) {
  optim::GradScaler s({.init_scale = 1024.0});
  Tensor w = from_vector({0.5, -2.0, 3.0}, Shape{3}, {.requires_grad = true});
  Tensor loss = sum(mul(w, w));
  Tensor scaled = s.scale(loss);
  EXPECT_EQ(scaled.dtype(), DType::f32);
  EXPECT_DOUBLE_EQ(scaled.item(), 1024.0 * loss.item());
  scaled.backward();
  std::vector<double> g = w.grad().to_vector();
  EXPECT_DOUBLE_EQ(g[0], 1024.0 * 1.0);
  EXPECT_DOUBLE_EQ(g[1], 1024.0 * -4.0);
  EXPECT_DOUBLE_EQ(g[2], 1024.0 * 6.0);
}

// A 16-bit loss with dims is scaled in f32: the 0-d scale would take its dtype (PyTorch's result
// type), and the default 65536 is infinite in f16.
TEST(GradScaler, ASixteenBitLossIsScaledInF32) {
  optim::GradScaler s;  // init_scale 65536
  Tensor per_sample = from_vector({0.5, 2.0}, Shape{2}, {.dtype = DType::f16});
  Tensor scaled = s.scale(per_sample);
  EXPECT_EQ(scaled.dtype(), DType::f32);
  EXPECT_EQ(scaled.to_vector(), (std::vector<double>{32768, 131072}));
}

TEST(GradScaler, UnscaleDividesGradientsAndFlagsNothingWhenFinite) {
  Model m;
  optim::SGD opt(m.params(), {.lr = 0.1});
  optim::GradScaler s({.init_scale = 256.0});
  m.set_grads(256.0, 0);
  s.unscale_(opt);
  std::vector<double> ga = m.a.grad().to_vector();
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(ga[i], 0.1 * (i + 1), 1e-6);
  EXPECT_EQ(s.found_inf().item(), 0.0);
  // step() after unscale_ must not unscale again (the clipping pattern).
  std::vector<double> before = m.a.to_vector();
  s.step(opt);
  std::vector<double> after = m.a.to_vector();
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(after[i], before[i] - 0.1 * 0.1 * (i + 1), 1e-6);
  s.update();
  EXPECT_EQ(s.get_scale(), 256.0);
  EXPECT_EQ(s.growth_tracker(), 1);
}

TEST(GradScaler, OverflowSkipsTheStepBitIdenticallyAndHalvesTheScale) {
  for (double poison : {kInf, -kInf, std::nan("")}) {
    Model m;
    optim::SGD opt(m.params(),
                   {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3});
    optim::GradScaler s({.init_scale = 4096.0});
    m.set_grads(4096.0, 0);  // one clean step so the momentum buffers exist and are non-zero
    s.step(opt);
    s.update();
    ASSERT_EQ(s.get_scale(), 4096.0);

    std::vector<std::vector<uint32_t>> before;
    for (const Tensor& p : m.params()) before.push_back(bits(p));
    optim::NamedTensors state_before = opt.state_dict();
    std::vector<std::vector<uint32_t>> mom_before;
    for (const auto& [name, t] : state_before) {
      if (t.dtype() == DType::f32) mom_before.push_back(bits(t));
    }
    ASSERT_EQ(mom_before.size(), 2u);

    m.set_grads(4096.0, 1, poison);
    s.step(opt);
    EXPECT_EQ(s.found_inf().item(), 1.0);
    s.update();

    for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(bits(m.params()[i]), before[i]) << i;
    size_t k = 0;
    for (const auto& [name, t] : opt.state_dict()) {
      if (t.dtype() == DType::f32) {
        EXPECT_EQ(bits(t), mom_before[k++]) << name;
      }
    }
    EXPECT_EQ(s.get_scale(), 2048.0);
    EXPECT_EQ(s.growth_tracker(), 0);
    EXPECT_TRUE(opt.found_inf().defined() == false) << "the flag must not outlive the step";

    // The next clean step runs again (the flag is reset by the next unscale).
    m.set_grads(2048.0, 2);
    std::vector<uint32_t> a_before = bits(m.a);
    s.step(opt);
    s.update();
    EXPECT_NE(bits(m.a), a_before);
  }
}

TEST(GradScaler, CleanStepsGrowTheScaleEveryGrowthInterval) {
  Model m;
  optim::SGD opt(m.params(), {.lr = 0.01});
  optim::GradScaler s({.init_scale = 8.0, .growth_interval = 3});
  const double expect_scale[] = {8, 8, 16, 16, 16, 32, 32};
  const int64_t expect_tracker[] = {1, 2, 0, 1, 2, 0, 1};
  for (int step = 0; step < 7; ++step) {
    m.set_grads(s.get_scale(), step);
    s.step(opt);
    s.update();
    EXPECT_EQ(s.get_scale(), expect_scale[step]) << "step " << step;
    EXPECT_EQ(s.growth_tracker(), expect_tracker[step]) << "step " << step;
  }
  // An overflow resets the tracker as well as halving.
  m.set_grads(s.get_scale(), 7, kInf);
  s.step(opt);
  s.update();
  EXPECT_EQ(s.get_scale(), 16.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, MisuseThrows) {
  Model m;
  optim::SGD opt(m.params(), {.lr = 0.01});
  optim::GradScaler s;
  EXPECT_THROW(s.update(), Error);  // nothing recorded yet
  m.set_grads(65536.0, 0);
  s.unscale_(opt);
  try {
    s.unscale_(opt);
    FAIL() << "unscale_ twice in one step must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already called"), std::string::npos) << e.what();
  }
  s.step(opt);
  EXPECT_THROW(s.step(opt), Error);
  EXPECT_THROW(s.unscale_(opt), Error);
  s.update();
  m.set_grads(65536.0, 1);
  EXPECT_NO_THROW(s.unscale_(opt));  // a new step starts after update()
  s.update();

  // f16 gradients are refused before anything is touched.
  m.set_grads(65536.0, 2);
  std::vector<uint32_t> ga = bits(m.a.grad());
  m.b.impl().grad = full({3}, 1.0, {.dtype = DType::f16}).impl_ptr();
  try {
    s.unscale_(opt);
    FAIL() << "f16 gradients must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3] f16 cpu"), std::string::npos) << e.what();
  }
  EXPECT_EQ(bits(m.a.grad()), ga);
}

TEST(GradScaler, DisabledScalerIsAPlainStep) {
  Model m;
  optim::SGD opt(m.params(), {.lr = 0.1});
  optim::GradScaler s({.enabled = false});
  Tensor loss = sum(m.a);
  EXPECT_TRUE(s.scale(loss).same(loss));
  m.set_grads(1.0, 0);
  s.unscale_(opt);
  s.unscale_(opt);  // no-op, so no error either
  std::vector<double> before = m.a.to_vector();
  s.step(opt);
  s.update();
  EXPECT_NEAR(m.a.to_vector()[0], before[0] - 0.1 * 0.1, 1e-7);
  EXPECT_EQ(s.get_scale(), 1.0);
}

TEST(GradScaler, AdamWStepCountDoesNotAdvanceOnASkippedStep) {
  // Reference: two clean steps. Scaled: clean, overflow (skipped), clean with the same grads.
  Model ref, m;
  optim::AdamW ref_opt(ref.params(), {.lr = 0.01, .weight_decay = 0.1});
  optim::AdamW opt(m.params(), {.lr = 0.01, .weight_decay = 0.1});
  ref.set_grads(1.0, 0);
  ref_opt.step();
  ref.set_grads(1.0, 1);
  ref_opt.step();

  optim::GradScaler s({.init_scale = 64.0});
  m.set_grads(64.0, 0);
  s.step(opt);
  s.update();
  m.set_grads(64.0, 5, kInf);
  s.step(opt);
  s.update();
  m.set_grads(32.0, 1);  // the scale halved
  s.step(opt);
  s.update();
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(bits(m.params()[i]), bits(ref.params()[i])) << i;
  optim::NamedTensors st = opt.state_dict();
  for (const auto& [name, t] : st) {
    if (name.find(".step") != std::string::npos) {
      EXPECT_EQ(t.item(), 2.0) << name;
    }
  }
}

TEST(GradScaler, StateDictRoundTrip) {
  Model m;
  optim::SGD opt(m.params(), {.lr = 0.01});
  optim::GradScaler s(
      {.init_scale = 512.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 5});
  for (int step = 0; step < 3; ++step) {
    m.set_grads(s.get_scale(), step, step == 0 ? kInf : 0.0);
    s.step(opt);
    s.update();
  }
  ASSERT_EQ(s.get_scale(), 128.0);
  ASSERT_EQ(s.growth_tracker(), 2);
  optim::NamedTensors state = s.state_dict();

  optim::GradScaler t;  // fresh, before any device tensor exists
  t.load_state_dict(state);
  EXPECT_EQ(t.get_scale(), 128.0);
  EXPECT_EQ(t.growth_tracker(), 2);
  EXPECT_EQ(t.options().growth_factor, 4.0);
  EXPECT_EQ(t.options().backoff_factor, 0.25);
  EXPECT_EQ(t.options().growth_interval, 5);
  // Both continue identically: three more clean steps reach the interval (2 + 3 = 5).
  for (optim::GradScaler* x : {&s, &t}) {
    for (int step = 0; step < 3; ++step) {
      m.set_grads(x->get_scale(), step);
      x->step(opt);
      x->update();
    }
    EXPECT_EQ(x->get_scale(), 512.0);
    EXPECT_EQ(x->growth_tracker(), 0);
  }
  // Loading into a scaler that already has device tensors overwrites them.
  s.load_state_dict(state);
  EXPECT_EQ(s.get_scale(), 128.0);
  EXPECT_EQ(s.growth_tracker(), 2);
  // A missing entry is rejected and nothing changes.
  optim::NamedTensors bad(state.begin(), state.end() - 1);
  EXPECT_THROW(t.load_state_dict(bad), Error);
  EXPECT_EQ(t.get_scale(), 512.0);
  // A growth_interval that no int64_t holds is refused before the cast (which would be UB).
  for (double v : {1e300, std::nan(""), 0.5, -3.0, 16777217.0}) {
    optim::NamedTensors odd = state;
    for (auto& [name, x] : odd)
      if (name == "growth_interval") x = full({}, v, {.dtype = DType::f64});
    try {
      t.load_state_dict(odd);
      ADD_FAILURE() << "growth_interval " << v << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("growth_interval must be a whole number in [1, 2^24]"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(t.get_scale(), 512.0);
  }
  // A tracker at the interval cannot be: the update that reaches it grows the scale and resets it.
  optim::NamedTensors full_tracker = state;
  for (auto& [name, x] : full_tracker)
    if (name == "growth_tracker") x = full({}, 5.0, {.dtype = DType::f64});
  EXPECT_THROW(t.load_state_dict(full_tracker), Error);
  EXPECT_EQ(t.growth_tracker(), 0);
}

// The f32 growth tracker stops counting past 2^24 (2^24 + 1 rounds back to 2^24), so a longer
// interval would never grow the scale: it is refused.
TEST(GradScaler, AGrowthIntervalPastTheTrackersRangeIsRefused) {
  EXPECT_NO_THROW(optim::GradScaler({.growth_interval = int64_t{1} << 24}));
  EXPECT_THROW(optim::GradScaler({.growth_interval = (int64_t{1} << 24) + 1}), Error);
}

// As PyTorch's: a disabled scaler saves no state and ignores a saved one, so an f16 run resumes
// in f32 and an f32 run resumes in f16 starting from the initial scale; an enabled scaler refuses
// the empty state a disabled one saves.
TEST(GradScaler, ADisabledScalerSavesNothingAndIgnoresAState) {
  optim::GradScaler off({.enabled = false});
  EXPECT_TRUE(off.state_dict().empty());
  optim::GradScaler on({.init_scale = 256.0});
  EXPECT_NO_THROW(off.load_state_dict(on.state_dict()));
  EXPECT_EQ(off.get_scale(), 1.0);
  EXPECT_THROW(on.load_state_dict(off.state_dict()), Error);
  EXPECT_EQ(on.get_scale(), 256.0);
}

// A throw inside step() (here the overflow agreement's collective failing) abandons the step: the
// next step unscales its own gradients again instead of stepping them still scaled.
TEST(GradScaler, AThrowInsideStepLeavesTheNextStepScaledRight) {
  Model m, ref;
  optim::SGD opt(m.params(), {.lr = 1.0});
  optim::SGD ref_opt(ref.params(), {.lr = 1.0});
  optim::GradScaler s({.init_scale = 1024.0});
  int calls = 0;
  s.set_found_inf_agreement([&](Tensor&) {
    if (calls++ == 0) throw std::runtime_error("collective failed");
  });
  m.set_grads(1024.0, 0);
  EXPECT_THROW(s.step(opt), std::runtime_error);
  m.set_grads(1024.0, 1);
  s.step(opt);
  s.update();
  ref.set_grads(1.0, 1);
  ref_opt.step();
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(bits(m.params()[i]), bits(ref.params()[i])) << i;
}
