// A seeded MobileNetV2 training step and a bit-exact snapshot of everything a step may change,
// shared by the determinism and fault-injection tests on the CPU (tests/train) and the GPU
// (tests/gpu), with the sweep that fails each allocation of a step in turn.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/factory.h"
#include "memory/oom_injection.h"
#include "models/registry.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/oom_recovery.h"
#include "train/trainer.h"

namespace frugal::train_test {

// Named host copies of tensors' bytes, compared bit for bit.
struct SnapshotEntry {
  std::string name;
  std::vector<unsigned char> bytes;
  bool operator==(const SnapshotEntry&) const = default;
};
using Snapshot = std::vector<SnapshotEntry>;

inline void add_to(Snapshot& s, const std::string& prefix, const optim::NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    const Tensor host = t.device().is_cpu() ? t : t.detach().to(Device::cpu());
    const auto* p = static_cast<const unsigned char*>(host.data_ptr());
    s.push_back({prefix + name, std::vector<unsigned char>(p, p + host.nbytes())});
  }
}

// Bit-identical: the same names, and every value the same bits.
inline void expect_identical(const Snapshot& a, const Snapshot& b, const std::string& where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].name, b[i].name) << where;
    EXPECT_TRUE(a[i].bytes == b[i].bytes) << where << ": " << a[i].name << " differs";
  }
}

// Everything a step may change, as bytes: weights and buffers (BatchNorm's running statistics),
// optimizer state, scaler state, and the default generator's offset (dropout).
inline Snapshot snapshot(const nn::Module& model, const optim::Optimizer& opt,
                         const optim::GradScaler* scaler) {
  Snapshot s;
  add_to(s, "model.", model.state_dict());
  add_to(s, "opt.", opt.state_dict());
  if (scaler) add_to(s, "scaler.", scaler->state_dict());
  const uint64_t offset = default_generator().offset();
  const auto* p = reinterpret_cast<const unsigned char*>(&offset);
  s.push_back({"rng", std::vector<unsigned char>(p, p + sizeof offset)});
  return s;
}

// Copies of the same, to put back with restore(): cheaper than building a model again.
struct SavedState {
  optim::NamedTensors model, opt, scaler;
  uint64_t rng = 0;
};

inline optim::NamedTensors cloned(const optim::NamedTensors& tensors) {
  optim::NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.detach().clone());
  return out;
}

inline SavedState save(const nn::Module& model, const optim::Optimizer& opt,
                       const optim::GradScaler* scaler) {
  return {cloned(model.state_dict()), cloned(opt.state_dict()),
          scaler ? cloned(scaler->state_dict()) : optim::NamedTensors{},
          default_generator().offset()};
}

inline void restore(const SavedState& saved, nn::Module& model, optim::Optimizer& opt,
                    optim::GradScaler* scaler) {
  model.load_state_dict(saved.model);
  opt.load_state_dict(saved.opt);  // momentum missing from it is dropped, as before a first step
  if (scaler) scaler->load_state_dict(saved.scaler);
  default_generator().set_offset(saved.rng);
}

// MobileNetV2 (width 0.25, dropout on, 10 classes) training on one fixed batch of `rows` 1x32x32
// images with SGD and momentum, in f32 or under f16 autocast with a GradScaler; the same every
// time it is made.
struct MobileNetStep {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::GradScaler> scaler;  // f16 only
  Tensor images;                              // [rows, 32, 32, 1]
  Tensor labels;                              // [rows] i64
  DType precision;

  MobileNetStep(Device device, DType p, int64_t rows = 2) : precision(p) {
    manual_seed(3);
    model = models::create("mobilenet_v2", {.num_classes = 10, .in_channels = 1, .width = 0.25});
    model->to(device);
    model->train();
    opt = std::make_unique<optim::SGD>(
        model->parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9, .weight_decay = 4e-5});
    if (p == DType::f16) {
      scaler = std::make_unique<optim::GradScaler>(optim::GradScalerOptions{.init_scale = 1024});
    }
    Generator gen(4);
    images = randn({rows, 32, 32, 1}, gen, {.device = device});
    std::vector<double> l;
    for (int64_t i = 0; i < rows; ++i) l.push_back(static_cast<double>((i * 3) % 10));
    labels = from_vector(l, {rows}, {.dtype = DType::i64, .device = device});
  }

  Tensor step() { return step_on(images, labels); }
  Tensor step_on(const Tensor& x, const Tensor& y) {
    return train::train_step(*model, *opt, x, y, precision, scaler.get());
  }
  // The step through train::run_undoable: an OutOfMemoryError leaves state() as it was.
  Tensor undoable_step() {
    return train::run_undoable(*model, *opt, scaler.get(), [&] { return step(); });
  }
  Snapshot state() const { return snapshot(*model, *opt, scaler.get()); }
  SavedState save() const { return train_test::save(*model, *opt, scaler.get()); }
  void restore(const SavedState& saved) { train_test::restore(saved, *model, *opt, scaler.get()); }
};

// Fails each allocation on `device` of the step after `warm_steps` clean ones in turn: the
// step (setup.undoable_step()) throws OutOfMemoryError and leaves setup.state() bit-identical,
// and the step run again right after it computes exactly what a step that never failed does.
// Between allocations the setup is put back as it was before the step (save/restore), which is
// bit-identical too (checked), so one setup serves the whole sweep; but a first step
// (warm_steps == 0) makes state lazily (momentum, the scaler's device tensors) that restore()
// cannot unmake, so there each allocation gets a fresh setup from make(). Returns how many
// allocations the step makes; stops at the first allocation that fails the test (one report is
// enough). Runs with one OpenMP thread: a sweep is a thousand steps of a tiny batch, where starting
// threads costs more than they save (and on a loaded 2-core machine, much more).
template <typename Make>
int64_t oom_at_every_allocation(Device device, Make make, int warm_steps) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto s = make();
  for (int i = 0; i < warm_steps; ++i) s->step();
  const SavedState saved = s->save();
  const Snapshot before = s->state();
  int64_t allocations = 0;
  {
    memory::InjectOom count(device, std::numeric_limits<int64_t>::max());
    s->undoable_step();
    allocations = count.seen();
  }
  const Snapshot clean_after = s->state();
  s->restore(saved);
  expect_identical(s->state(), before, "restored after the clean step");
  EXPECT_GT(allocations, 20);
  for (int64_t k = 0; k < allocations && !::testing::Test::HasFailure(); ++k) {
    const std::string at = "allocation " + std::to_string(k) + " of " + std::to_string(allocations);
    {
      memory::InjectOom fail(device, k);
      EXPECT_THROW(s->undoable_step(), OutOfMemoryError) << at;
      EXPECT_TRUE(fail.fired()) << at;
    }
    expect_identical(s->state(), before, "after an OOM at " + at);
    s->step();
    expect_identical(s->state(), clean_after, "the step after an OOM at " + at);
    if (warm_steps == 0) {
      s = make();
    } else {
      s->restore(saved);
    }
  }
  omp_set_num_threads(threads);
  return allocations;
}

}  // namespace frugal::train_test
