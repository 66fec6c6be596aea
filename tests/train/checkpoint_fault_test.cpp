// FaultInjectionCheckpointWrite.*: a checkpoint save that fails at any point (every write, fsync
// and rename call in turn; the disk filling at every byte offset) throws, leaves the previous
// checkpoint bit-identical and loadable, and leaves no temporary file (Note [Save targets]).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/factory.h"
#include "file_test_util.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"

using namespace frugal;
using frugal::test::read_bytes;
using frugal::test::ScratchFile;

namespace {

std::shared_ptr<nn::Sequential> tiny_model() {
  manual_seed(3);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3), std::make_shared<nn::Linear>(4, 3)});
}

// One SGD step with gradients that depend on `step` only, so the state changes every time.
void sgd_step(nn::Module& m, optim::Optimizer& opt, uint64_t step) {
  auto params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    Generator gen(100 * step + i);
    params[i].set_grad(randn(params[i].shape(), gen));
  }
  opt.step();
}

// The files next to `path` whose names start with its file name (the target, temporaries).
std::vector<std::string> siblings(const std::string& path) {
  const std::filesystem::path p(path);
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path())) {
    if (e.path().filename().string().rfind(p.filename().string(), 0) == 0) {
      out.push_back(e.path().filename());
    }
  }
  return out;
}

class FaultInjectionCheckpointWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tiny_model();
    opt_ = std::make_unique<optim::SGD>(model_->parameters(),
                                        optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
    sgd_step(*model_, *opt_, 1);
    train::save_checkpoint(file_.path(), *model_, opt_.get(), {.epoch = 1, .step = 1});
    previous_ = read_bytes(file_.path());
    sgd_step(*model_, *opt_, 2);  // the state the failing saves try to write
  }

  // After a failed save: the previous bytes exactly, loadable, and no temporary file.
  void expect_previous_checkpoint_intact(const std::string& where) {
    EXPECT_EQ(read_bytes(file_.path()), previous_) << where;
    auto fresh = tiny_model();
    optim::SGD fresh_opt(fresh->parameters(), {.lr = 0.1, .momentum = 0.9});
    const train::TrainingState st = train::load_checkpoint(file_.path(), *fresh, &fresh_opt);
    EXPECT_EQ(st.epoch, 1) << where;
    EXPECT_EQ(siblings(file_.path()).size(), 1u) << where;
  }

  void save() {
    train::save_checkpoint(file_.path(), *model_, opt_.get(), {.epoch = 2, .step = 2});
  }

  ScratchFile file_{"ckpt"};
  std::shared_ptr<nn::Sequential> model_;
  std::unique_ptr<optim::SGD> opt_;
  std::string previous_;
};

}  // namespace

TEST_F(FaultInjectionCheckpointWrite, FailingEachCallInTurnKeepsThePreviousCheckpoint) {
  int64_t call = 0;
  for (;; ++call) {
    train::ScopedWriteFault fault(call, -1);
    try {
      save();
    } catch (const Error& e) {
      expect_previous_checkpoint_intact("failing call " + std::to_string(call) + ": " + e.what());
      EXPECT_NE(std::string(e.what()).find("is unchanged"), std::string::npos) << e.what();
      continue;
    }
    ASSERT_LT(fault.calls(), call + 1) << "call " << call << " was failed but the save succeeded";
    break;  // the save made fewer calls than `call`: every one of them has been failed once
  }
  EXPECT_GE(call, 5);  // at least: length, header, data, fsync, rename
  EXPECT_NE(read_bytes(file_.path()), previous_);
}

TEST_F(FaultInjectionCheckpointWrite, TheDiskFillingAtEveryByteOffsetKeepsThePreviousCheckpoint) {
  save();
  const int64_t size = static_cast<int64_t>(read_bytes(file_.path()).size());
  // Put the previous checkpoint back, then fail at every offset of the new one.
  frugal::test::write_bytes(file_.path(), previous_);
  for (int64_t byte = 0; byte < size; ++byte) {
    train::ScopedWriteFault fault(-1, byte);
    try {
      save();
      ADD_FAILURE() << "the disk filled at byte " << byte << " but the save succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("byte offset " + std::to_string(byte)),
                std::string::npos)
          << e.what();
    }
    if (::testing::Test::HasFailure()) return;  // one clear failure, not thousands
    EXPECT_EQ(read_bytes(file_.path()), previous_) << "byte " << byte;
  }
  expect_previous_checkpoint_intact("after the byte sweep");
  train::ScopedWriteFault no_fault(-1, size);  // room for exactly the file: it fits
  save();
  EXPECT_NE(read_bytes(file_.path()), previous_);
}
