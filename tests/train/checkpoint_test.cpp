// Training checkpoints: resuming SGD with momentum gives bit-identical parameters to an
// uninterrupted run; any bad part (optimizer, model, metadata) leaves model and optimizer as they
// were.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/factory.h"
#include "core/ops.h"
#include "file_test_util.h"
#include "load_oom_sweep.h"
#include "nn/layers.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/safetensors.h"

using namespace frugal;
using frugal::test::error_of;
using frugal::test::expect_mentions;
using frugal::test::ScratchFile;

namespace {

// Conv2d(2, 3, 3) (4-D weight, so its momentum crosses the layout conversion) and Linear(4, 3).
std::shared_ptr<nn::Sequential> tiny_model(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3), std::make_shared<nn::Linear>(4, 3)});
}

constexpr optim::SgdOptions kSgd = {
    .lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01};

// Gradients set by hand, a function of the step and the parameter only.
void train_steps(nn::Module& m, optim::Optimizer& opt, int from, int to) {
  for (int step = from; step < to; ++step) {
    auto params = m.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      Generator gen(1000 * static_cast<uint64_t>(step) + i);
      params[i].set_grad(randn(params[i].shape(), gen));
    }
    opt.step();
  }
}

std::vector<std::string> params_of(const nn::Module& m) {
  return test::snapshot(m.named_parameters());
}

// A checkpoint of tiny_model(1) after 3 SGD steps; `at_save` gets its parameters then.
void write_checkpoint(const std::string& path, std::vector<std::string>* at_save = nullptr) {
  auto a = tiny_model(1);
  optim::SGD opt(a->parameters(), kSgd);
  train_steps(*a, opt, 0, 3);
  if (at_save) *at_save = params_of(*a);
  train::save_checkpoint(
      path, *a, &opt,
      {.epoch = 1, .step = 3, .seed = 42, .rng_offset = 99, .extra = {{"run", "unit-test"}}});
}

// Rewrites a checkpoint with `edit` applied to its raw (file-layout) tensors or metadata.
void rewrite(const std::string& from, const std::string& to,
             const std::function<void(train::NamedTensors&, train::Metadata&)>& edit) {
  auto file = train::load_safetensors(from);
  edit(file.tensors, file.metadata);
  train::save_safetensors(to, file.tensors, file.metadata);
}

}  // namespace

TEST(Checkpoint, ResumedSgdMatchesAnUninterruptedRunBitForBit) {
  ScratchFile f("ckpt");
  auto a = tiny_model(1);
  optim::SGD opt_a(a->parameters(), kSgd);
  train_steps(*a, opt_a, 0, 3);
  train::save_checkpoint(
      f.path(), *a, &opt_a,
      {.epoch = 1, .step = 3, .seed = 42, .rng_offset = 99, .extra = {{"run", "x"}}});
  train_steps(*a, opt_a, 3, 5);

  auto b = tiny_model(7);
  optim::SGD opt_b(b->parameters(),
                   {.lr = 0.5, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  train::TrainingState s = train::load_checkpoint(f.path(), *b, &opt_b);
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.rng_offset, 99u);
  EXPECT_EQ(s.optimizer, "sgd");
  EXPECT_EQ(s.extra, (train::Metadata{{"run", "x"}}));
  EXPECT_DOUBLE_EQ(opt_b.lr(), 0.1);
  train_steps(*b, opt_b, 3, 5);

  EXPECT_EQ(params_of(*b), params_of(*a));
  EXPECT_EQ(test::snapshot(opt_b.state_dict()), test::snapshot(opt_a.state_dict()));
}

TEST(Checkpoint, FileHoldsTorchNamesLayoutsAndTheState) {
  ScratchFile f("ckpt");
  write_checkpoint(f.path());
  auto [tensors, md] = train::load_safetensors(f.path());
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  EXPECT_EQ(by_name.at("0.weight").shape(), (Shape{3, 2, 3, 3}));  // OIHW
  EXPECT_EQ(by_name.at("optimizer.state.0.momentum_buffer").shape(), (Shape{3, 2, 3, 3}));
  EXPECT_EQ(by_name.at("optimizer.state.2.momentum_buffer").shape(), (Shape{3, 4}));
  EXPECT_EQ(by_name.at("optimizer.lr").dtype(), DType::f64);
  EXPECT_EQ(by_name.at("optimizer.lr").item(), 0.1);
  EXPECT_EQ(by_name.at("optimizer.param_count").item(), 4.0);
  EXPECT_EQ(by_name.at("optimizer.momentum").item(), kSgd.momentum);
  // 4 parameters; lr, param_count, 4 hyper-parameters and 4 momentum buffers
  EXPECT_EQ(by_name.size(), 4u + 10u);
  EXPECT_EQ(md.at("frugal.format"), "checkpoint");
  EXPECT_EQ(md.at("frugal.optimizer"), "sgd");
  EXPECT_EQ(md.at("frugal.epoch"), "1");
  EXPECT_EQ(md.at("frugal.step"), "3");
  EXPECT_EQ(md.at("frugal.seed"), "42");
  EXPECT_EQ(md.at("run"), "unit-test");
}

TEST(Checkpoint, WithoutAnOptimizerLoadsTheModelOnly) {
  ScratchFile f("ckpt");
  std::vector<std::string> at_save;
  write_checkpoint(f.path(), &at_save);
  auto c = tiny_model(9);
  train::TrainingState s = train::load_checkpoint(f.path(), *c, nullptr);
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(params_of(*c), at_save);
}

// Every corruption is rejected with the model and the optimizer exactly as they were.
TEST(Checkpoint, BadPartsChangeNothing) {
  ScratchFile good("good");
  write_checkpoint(good.path());
  auto erase = [](train::NamedTensors& t, const std::string& name) {
    std::erase_if(t, [&](const auto& e) { return e.first == name; });
  };
  struct Case {
    const char* what;
    std::function<void(train::NamedTensors&, train::Metadata&)> edit;
    std::vector<std::string> mentions;
  };
  std::vector<Case> cases = {
      {"momentum shape",
       [](auto& t, auto&) {
         for (auto& [n, x] : t)
           if (n == "optimizer.state.0.momentum_buffer") x = full({3, 2, 3, 2}, 1.0);
       },
       {"optimizer part rejected", "momentum_buffer"}},
      {"no lr",
       [&](auto& t, auto&) { erase(t, "optimizer.lr"); },
       {"optimizer part rejected", "lr"}},
      {"extra optimizer entry",
       [](auto& t, auto&) { t.emplace_back("optimizer.state.9.momentum_buffer", full({2}, 1.0)); },
       {"optimizer part rejected", "state.9.momentum_buffer"}},
      {"model part", [&](auto& t, auto&) { erase(t, "1.bias"); }, {"missing tensor '1.bias'"}},
      {"other optimizer",
       [](auto&, auto& md) { md["frugal.optimizer"] = "adamw"; },
       {"holds adamw optimizer state, but a sgd"}},
      {"no optimizer part",
       [&](auto& t, auto& md) {
         md.erase("frugal.optimizer");
         std::erase_if(t, [](const auto& e) { return e.first.rfind("optimizer.", 0) == 0; });
       },
       {"holds no optimizer state"}},
      {"bad epoch", [](auto&, auto& md) { md["frugal.epoch"] = "3x"; }, {"'frugal.epoch' = '3x'"}},
      {"negative epoch",
       [](auto&, auto& md) { md["frugal.epoch"] = "-1"; },
       {"epoch -1 and step 3", "fewer than 0"}},
      {"negative step",
       [](auto&, auto& md) { md["frugal.step"] = "-9223372036854775808"; },
       {"step -9223372036854775808", "fewer than 0"}},
      {"nan weight",
       [](auto& t, auto&) {
         for (auto& [n, x] : t)
           if (n == "1.weight") x = full(x.shape(), NAN);
       },
       {"tensor '1.weight' holds nan at element 0"}},
      {"inf momentum",
       [](auto& t, auto&) {
         for (auto& [n, x] : t)
           if (n == "optimizer.state.1.momentum_buffer") x = full(x.shape(), -INFINITY);
       },
       {"not finite", "tensor 'optimizer.state.1.momentum_buffer' holds -inf at element 0"}},
      {"nan learning rate",
       [](auto& t, auto&) {
         for (auto& [n, x] : t)
           if (n == "optimizer.lr") x = full({}, NAN, {.dtype = DType::f64});
       },
       {"tensor 'optimizer.lr' holds nan"}},
      {"weights only",
       [](auto&, auto& md) { md.erase("frugal.format"); },
       {"not a frugal checkpoint"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    ScratchFile f("bad");
    rewrite(good.path(), f.path(), c.edit);
    auto b = tiny_model(7);
    optim::SGD opt(b->parameters(), {.lr = 0.5, .momentum = 0.9});
    train_steps(*b, opt, 10, 11);  // some momentum state of its own, to be kept
    auto model_before = params_of(*b);
    auto opt_before = test::snapshot(opt.state_dict());
    std::string msg = error_of([&] { train::load_checkpoint(f.path(), *b, &opt); });
    expect_mentions(msg, {f.path()});
    expect_mentions(msg, c.mentions);
    EXPECT_EQ(params_of(*b), model_before);
    EXPECT_EQ(test::snapshot(opt.state_dict()), opt_before);
    EXPECT_DOUBLE_EQ(opt.lr(), 0.5);
  }
}

TEST(Checkpoint, SaveRejectsReservedNames) {
  ScratchFile f("ckpt");
  auto a = tiny_model(1);
  std::string msg = error_of([&] {
    train::save_checkpoint(f.path(), *a, nullptr, {.extra = {{"frugal.epoch", "9"}}});
  });
  expect_mentions(msg, {"'frugal.epoch'", "reserved"});
}

// A diverged run's state (here an infinite momentum buffer) is not saved: the last good file
// stays as it was, where a checkpoint no resume can read would have replaced it.
TEST(Checkpoint, AStateThatIsNotFiniteIsNotSavedAndThePreviousFileStays) {
  ScratchFile f("ckpt");
  write_checkpoint(f.path());
  const std::string good = test::read_bytes(f.path());
  auto a = tiny_model(1);
  optim::SGD opt(a->parameters(), kSgd);
  train_steps(*a, opt, 0, 1);
  a->parameters()[1].set_grad(full(a->parameters()[1].shape(), INFINITY));
  opt.step();
  std::string msg = error_of([&] { train::save_checkpoint(f.path(), *a, &opt, {.epoch = 2}); });
  expect_mentions(msg, {f.path(), "was not written", "diverged", "'0.bias' holds",
                        "'optimizer.state.1.momentum_buffer' holds inf"});
  EXPECT_EQ(test::read_bytes(f.path()), good);
}

// The loss scaler's state travels with the checkpoint; a bad scaler part changes nothing.
TEST(Checkpoint, ScalerStateResumesAndABadScalerPartChangesNothing) {
  ScratchFile file("scaler");
  auto a = tiny_model(1);
  optim::SGD opt(a->parameters(), kSgd);
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 5});
  // Three clean scaled steps: the growth tracker reaches 3 (a synchronising read in tests only).
  for (int step = 0; step < 3; ++step) {
    Tensor loss = sum(mul(a->parameters()[0], a->parameters()[0]));
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  ASSERT_EQ(scaler.growth_tracker(), 3);
  train::save_checkpoint(file.path(), *a, &opt, {.epoch = 1, .step = 3}, &scaler);

  auto b = tiny_model(2);
  optim::SGD opt_b(b->parameters(), kSgd);
  optim::GradScaler fresh({.growth_interval = 5});
  train::load_checkpoint(file.path(), *b, &opt_b, &fresh);
  EXPECT_EQ(fresh.get_scale(), 1024.0);
  EXPECT_EQ(fresh.growth_tracker(), 3);
  EXPECT_EQ(params_of(*b), params_of(*a));

  // A scaler part with a wrong entry: model, optimizer and scaler stay as they were.
  auto entries = train::load_safetensors(file.path());
  for (auto& [name, t] : entries.tensors) {
    if (name == "scaler.scale") t = zeros({2}, {.dtype = DType::f64});
  }
  train::save_safetensors(file.path(), entries.tensors, entries.metadata);
  auto c = tiny_model(3);
  optim::SGD opt_c(c->parameters(), kSgd);
  optim::GradScaler untouched({.init_scale = 8.0});
  const std::vector<std::string> before = params_of(*c);
  std::string msg = error_of([&] { train::load_checkpoint(file.path(), *c, &opt_c, &untouched); });
  expect_mentions(msg, {"scaler part rejected", "nothing was loaded"});
  EXPECT_EQ(params_of(*c), before);
  EXPECT_TRUE(opt_c.state_tensors().empty()) << "no momentum buffers were loaded";
  EXPECT_EQ(untouched.get_scale(), 8.0);
}

// Running out of the model's device memory at any allocation of a load changes nothing and stays
// an OutOfMemoryError (the optimizer part's too, which read as a rejected file). The model lives
// on meta here, whose allocator InjectOom fails as a GPU's would; tests/gpu/checkpoint_gpu_test.cpp
// does the same on the device, where the copies into the model also moved the tensors there.
TEST(Checkpoint, RunningOutOfDeviceMemoryWhileLoadingChangesNothing) {
  ScratchFile f("ckpt_oom.safetensors");
  write_checkpoint(f.path());
  test::expect_every_oom_of_a_load_changes_nothing(
      f.path(), Device::meta(),
      [] {
        std::shared_ptr<nn::Module> m = tiny_model(2);
        m->to(Device::meta());
        return m;
      },
      kSgd,
      [](const nn::Module& m) {
        std::vector<std::string> versions;
        for (const Tensor& p : m.parameters()) versions.push_back(std::to_string(p.version()));
        return versions;
      });
}
