// `frugal train` and `frugal eval` end to end on tiny runs: a bad --save fails before any
// training, a resumed finished run reports its real accuracy, a resumed step count of 9e18 does
// not hang the schedule, and eval needs only the test files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "common/printed_accuracy.h"
#include "data/fashion_mnist.h"
#include "memory/oom_injection.h"
#include "models/registry.h"
#include "tools/run_command.h"
#include "train/checkpoint.h"
#include "train/file_test_util.h"
#include "train/safetensors.h"

using namespace frugal;
using namespace frugal::tools;
using frugal::test::final_accuracy;
using frugal::test::ScratchDir;
namespace fs = std::filesystem;

namespace {

struct CommandRun {
  int code = -1;
  std::string out, err;
};

CommandRun run(const std::string& command, const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  CommandRun r;
  r.code = run_command(command, args);
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

// A few CPU seconds: 1024 synthetic 8x8 images, 4 steps an epoch of a quarter-width MobileNetV2.
std::vector<std::string> tiny_train(std::vector<std::string> more) {
  std::vector<std::string> args = {"--data",   "synthetic", "--image-size", "8",
                                   "--width",  "0.25",      "--batch",      "256",
                                   "--device", "cpu",       "--workers",    "0"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The first field of each line of the --loss-log at `path`: "step", then the steps.
std::vector<std::string> logged_steps(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> steps;
  while (std::getline(in, line)) steps.push_back(line.substr(0, line.find(',')));
  return steps;
}

}  // namespace

// The save target is checked before the data is read or a step is taken: with a data folder that
// does not exist, the error is about --save.
TEST(TrainCommand, AnUnwritableSaveFailsBeforeTraining) {
  ScratchDir dir;
  for (const std::string& save :
       {dir / "", dir / "missing/ckpt.safetensors", std::string("/dev/null")}) {
    const CommandRun r =
        run("train", {"--data-dir", dir / "no-data", "--device", "cpu", "--save", save});
    EXPECT_EQ(r.code, kExitUsage) << r.err;
    EXPECT_NE(r.err.find("--save '" + save + "' cannot be written"), std::string::npos) << r.err;
  }
  const CommandRun r = run("train", {"--data-dir", dir / "no-data", "--device", "cpu",
                                     "--memory-log", dir / "missing/log.csv"});
  EXPECT_EQ(r.code, kExitUsage) << r.err;
  EXPECT_NE(r.err.find("--memory-log"), std::string::npos) << r.err;
}

// Flags that act only on a GPU or across ranks are refused where they would be ignored, before
// the data is read (the data folder here does not exist).
TEST(TrainCommand, GraphOnTheCpuAndRankFlagsInOneProcessAreRefused) {
  ScratchDir dir;
  const std::vector<std::string> base{"--data-dir", dir / "no-data", "--device", "cpu"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return run("train", extra);
  };
  CommandRun r = with({"--graph"});
  EXPECT_EQ(r.code, kExitUsage) << r.err;
  EXPECT_NE(r.err.find("--graph replays the step from a CUDA graph; the device is cpu"),
            std::string::npos)
      << r.err;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--sync-bn"}, {"--reduce-precision", "bf16"}}) {
    r = with(extra);
    EXPECT_EQ(r.code, kExitUsage) << r.err;
    EXPECT_NE(r.err.find("act across data-parallel ranks, and this run is one process"),
              std::string::npos)
        << r.err;
  }
}

TEST(TrainCommand, AResumedFinishedRunReportsItsAccuracyAndHugeStepsDoNotHang) {
  ScratchDir dir;
  const std::string ckpt = dir / "ckpt.safetensors";
  const CommandRun first = run("train", tiny_train({"--save", ckpt}));
  ASSERT_EQ(first.code, kExitOk) << first.err;
  const std::string accuracy = final_accuracy(first.out);
  ASSERT_FALSE(accuracy.empty()) << first.out;

  const CommandRun again = run("train", tiny_train({"--resume", ckpt}));
  ASSERT_EQ(again.code, kExitOk) << again.err;
  // The seed drew the data order and the random stream: another one would resume another run.
  const CommandRun reseeded = run("train", tiny_train({"--resume", ckpt, "--seed", "5"}));
  EXPECT_EQ(reseeded.code, kExitUsage);
  EXPECT_NE(reseeded.err.find("saved by a run with --seed 0, and this run has --seed 5"),
            std::string::npos)
      << reseeded.err;
  // The checkpoint's optimizer hyper-parameters are what a resume runs with: a flag that
  // differs would be ignored, so it is refused, naming the saved value.
  for (const std::vector<std::string>& flag : {std::vector<std::string>{"--momentum", "0.5"},
                                               {"--lr", "0.7"},
                                               {"--weight-decay", "0.25"}}) {
    std::vector<std::string> extra{"--resume", ckpt, "--epochs", "2"};
    extra.insert(extra.end(), flag.begin(), flag.end());
    const CommandRun other = run("train", tiny_train(extra));
    EXPECT_EQ(other.code, kExitUsage) << other.err;
    EXPECT_NE(other.err.find("saved by a run with " + flag[0]), std::string::npos) << other.err;
    EXPECT_NE(other.err.find("this run has " + flag[0] + " " + flag[1]), std::string::npos)
        << other.err;
  }
  EXPECT_NE(again.out.find("nothing to train"), std::string::npos) << again.out;
  EXPECT_EQ(final_accuracy(again.out), accuracy) << again.out;

  // A step count of 2^53 used to step the cosine schedule 2^53 times (a hang); 9e18 is refused.
  train::SafetensorsFile file = train::load_safetensors(ckpt);
  file.metadata["frugal.step"] = "9007199254740992";
  train::save_safetensors(dir / "huge.safetensors", file.tensors, file.metadata);
  const CommandRun huge = run("train", tiny_train({"--resume", dir / "huge.safetensors", "--epochs",
                                                   "2", "--schedule", "cosine"}));
  EXPECT_EQ(huge.code, kExitOk) << huge.err;
  file.metadata["frugal.step"] = "9000000000000000000";
  train::save_safetensors(dir / "huger.safetensors", file.tensors, file.metadata);
  const CommandRun huger = run("train", tiny_train({"--resume", dir / "huger.safetensors"}));
  EXPECT_EQ(huger.code, kExitError);
  EXPECT_NE(huger.err.find("step 9000000000000000000"), std::string::npos) << huger.err;

  file.metadata["frugal.epoch"] = "-1";
  train::save_safetensors(dir / "negative.safetensors", file.tensors, file.metadata);
  const CommandRun negative = run("train", tiny_train({"--resume", dir / "negative.safetensors"}));
  EXPECT_EQ(negative.code, kExitError);
  EXPECT_NE(negative.err.find("epoch -1"), std::string::npos) << negative.err;
}

// The epoch's checkpoint is written before its evaluation: an evaluation that fails (here the
// run's last allocation fails, which is in the evaluation) loses no training. It was written
// after, and the epoch was lost.
TEST(TrainCommand, AFailedEvaluationKeepsTheEpochsCheckpoint) {
  ScratchDir dir;
  const std::vector<std::string> args = tiny_train({"--limit", "256", "--test-limit", "64"});
  auto with_save = [&](const std::string& path) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--save", path});
    return a;
  };
  int64_t allocations = 0;
  {
    memory::InjectOom count_only(Device::cpu(), int64_t{1} << 60);
    ASSERT_EQ(run("train", with_save(dir / "counted.safetensors")).code, kExitOk);
    allocations = count_only.seen();
  }
  const std::string ckpt = dir / "ckpt.safetensors";
  memory::InjectOom last(Device::cpu(), allocations - 1);
  const CommandRun r = run("train", with_save(ckpt));
  ASSERT_TRUE(last.fired());
  EXPECT_NE(r.code, kExitOk) << r.out;
  EXPECT_NE(r.err.find("out of memory"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("epoch 1/1:"), std::string::npos) << "the failure was not in evaluation";
  ASSERT_TRUE(fs::exists(ckpt));
  models::ModelConfig mc{.num_classes = 10, .in_channels = 1, .width = 0.25};
  auto model = models::create("mobilenet_v2", mc);
  EXPECT_EQ(train::load_checkpoint(ckpt, *model, nullptr).epoch, 1);
}

// Evaluation reads batches of the step's slice size (at least 32 rows): with --micro-batches the
// evaluation at the whole --batch used to set the run's peak (about 55 MiB here; 16.5 MiB now,
// the step's).
TEST(TrainCommand, EvaluationStaysWithinTheStepsMemory) {
  const CommandRun r = run("train", {"--data", "synthetic", "--image-size", "32", "--width", "0.25",
                                     "--batch", "256", "--micro-batches", "8", "--device", "cpu",
                                     "--workers", "0", "--limit", "256", "--test-limit", "256"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::smatch step, run_peak;  // the epoch's step peak; the memory summary's peak for the run
  ASSERT_TRUE(std::regex_search(r.out, step, std::regex(R"(peak allocated ([0-9.]+) MiB)")));
  ASSERT_TRUE(std::regex_search(
      r.out, run_peak,
      std::regex(R"(\| Allocated memory +\| +[0-9]+ [KMG]?i?B +\| +([0-9]+) (KiB|MiB) )")))
      << r.out;
  const double step_mib = std::stod(step[1]);
  const double run_mib = std::stod(run_peak[1]) / (run_peak[2] == "KiB" ? 1024.0 : 1.0);
  EXPECT_LE(run_mib, step_mib + 1.0) << "the evaluation outgrew the step:\n" << r.out;
}

// A slice of the batch the model cannot train on (one row at MobileNetV2's 1x1 end) is refused
// before training, naming --batch and --micro-batches; it used to load the data, print
// "training ..." and fail at the first step with BatchNorm's message alone.
TEST(TrainCommand, SlicesTheModelCannotTrainOnAreRefusedNamingTheFlags) {
  std::vector<std::string> args = tiny_train({"--micro-batches", "256"});
  const CommandRun sliced = run("train", args);
  EXPECT_EQ(sliced.code, kExitUsage) << sliced.err;
  EXPECT_NE(sliced.err.find("train: --batch 256 as --micro-batches 256 trains on slices of 1 row, "
                            "which mobilenet_v2 at --image-size 8 cannot train on (batch_norm: "
                            "expected more than 1 value per channel"),
            std::string::npos)
      << sliced.err;
  EXPECT_NE(sliced.err.find("give a larger --batch or fewer --micro-batches"), std::string::npos)
      << sliced.err;
  EXPECT_EQ(sliced.out.find("training mobilenet_v2"), std::string::npos) << sliced.out;
  // With a budget too: the search let the plain step's BatchNorm error through unnamed.
  const CommandRun budget = run("train", tiny_train({"--batch", "1", "--memory-budget", "1GiB"}));
  EXPECT_EQ(budget.code, kExitUsage) << budget.err;
  EXPECT_NE(budget.err.find("train: --batch 1 trains on slices of 1 row"), std::string::npos)
      << budget.err;
  const CommandRun one = run("train", tiny_train({"--batch", "1"}));
  EXPECT_EQ(one.code, kExitUsage) << one.err;
  EXPECT_NE(one.err.find("train: --batch 1 trains on slices of 1 row"), std::string::npos)
      << one.err;
  EXPECT_EQ(
      run("train", tiny_train({"--micro-batches", "128", "--epochs", "1", "--limit", "256"})).code,
      kExitOk);
}

// Note [What eval takes from a checkpoint]: eval builds the model the checkpoint was trained as
// and feeds it images of its size without being told; it used to build width 1.0 (a 257-line
// load error) and, told the width, feed 32x32 images to a model trained at 16x16 without a word.
TEST(EvalCommand, TakesTheModelWidthImageSizeAndDataFromTheCheckpoint) {
  ScratchDir dir;
  const std::string ckpt = dir / "ckpt.safetensors";
  const CommandRun trained = run("train", tiny_train({"--save", ckpt, "--test-limit", "64"}));
  ASSERT_EQ(trained.code, kExitOk) << trained.err;
  const std::vector<std::string> base{"--load",    ckpt, "--device",     "cpu",
                                      "--workers", "0",  "--test-limit", "64"};
  auto eval = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return run("eval", more);
  };
  const CommandRun plain = eval({});
  ASSERT_EQ(plain.code, kExitOk) << plain.err;
  EXPECT_NE(plain.out.find("test accuracy: " + final_accuracy(trained.out)), std::string::npos)
      << plain.out << "\n"
      << trained.out;
  const CommandRun wider = eval({"--width", "0.5"});
  EXPECT_EQ(wider.code, kExitUsage) << wider.err;
  EXPECT_NE(wider.err.find("was trained at --width 0.25, and this run has --width 0.5"),
            std::string::npos)
      << wider.err;
  const CommandRun other = eval({"--model", "resnet18"});
  EXPECT_EQ(other.code, kExitUsage) << other.err;
  EXPECT_NE(other.err.find("was trained as --model mobilenet_v2"), std::string::npos) << other.err;
  const CommandRun dir_only = eval({"--data-dir", dir / ""});
  EXPECT_EQ(dir_only.code, kExitUsage) << dir_only.err;
  EXPECT_NE(dir_only.err.find("was trained on --data synthetic, and --data-dir is for "
                              "fashion-mnist"),
            std::string::npos)
      << dir_only.err;
  const CommandRun larger = eval({"--image-size", "16", "--width", "0.25"});
  ASSERT_EQ(larger.code, kExitOk) << larger.err;
  EXPECT_NE(larger.out.find("was trained at --image-size 8; evaluating at 16 as asked"),
            std::string::npos)
      << larger.out;
}

// Another --precision may resume a run; what happens to the loss scaler is said, where it used
// to go or start afresh without a word.
TEST(TrainCommand, AResumeInAnotherPrecisionSaysWhatBecomesOfTheLossScaler) {
  ScratchDir dir;
  const std::string f16 = dir / "f16.safetensors", f32 = dir / "f32.safetensors";
  ASSERT_EQ(run("train", tiny_train({"--precision", "f16", "--save", f16})).code, kExitOk);
  ASSERT_EQ(run("train", tiny_train({"--save", f32})).code, kExitOk);
  const CommandRun to_bf16 =
      run("train", tiny_train({"--resume", f16, "--epochs", "2", "--precision", "bf16"}));
  ASSERT_EQ(to_bf16.code, kExitOk) << to_bf16.err;
  EXPECT_NE(to_bf16.out.find("loss scaler is left unused: this run trains in bf16"),
            std::string::npos)
      << to_bf16.out;
  const CommandRun to_f16 =
      run("train", tiny_train({"--resume", f32, "--epochs", "2", "--precision", "f16"}));
  ASSERT_EQ(to_f16.code, kExitOk) << to_f16.err;
  EXPECT_NE(to_f16.out.find("holds no loss scaler (its run trained in f32 or bf16); loss scaling "
                            "starts afresh at 65536"),
            std::string::npos)
      << to_f16.out;
  const CommandRun same =
      run("train", tiny_train({"--resume", f16, "--epochs", "2", "--precision", "f16"}));
  ASSERT_EQ(same.code, kExitOk) << same.err;
  EXPECT_EQ(same.out.find("loss scal"), std::string::npos) << same.out;
}

// A resumed run counts its optimizer steps on from the checkpoint's, with another --batch too: its
// loss log goes on where the first run's ended (in the same file) and its checkpoint holds the
// steps taken, which the learning-rate schedule follows.
TEST(TrainCommand, AResumedRunCountsItsStepsOnFromTheCheckpoints) {
  ScratchDir dir;
  const std::string ckpt = dir / "ckpt.safetensors", log = dir / "loss.csv";
  ASSERT_EQ(run("train", tiny_train({"--save", ckpt, "--loss-log", log})).code, kExitOk);
  // 4 steps of 256, then an epoch of 8 steps of 128 (later flags win).
  const CommandRun resumed =
      run("train", tiny_train({"--resume", ckpt, "--epochs", "2", "--batch", "128", "--loss-log",
                               log, "--save", dir / "ckpt2.safetensors"}));
  ASSERT_EQ(resumed.code, kExitOk) << resumed.err;
  auto header_and = [](int from, int to) {
    std::vector<std::string> want = {"step"};
    for (int i = from; i <= to; ++i) want.push_back(std::to_string(i));
    return want;
  };
  EXPECT_EQ(logged_steps(log), header_and(1, 12));
  EXPECT_EQ(train::load_safetensors(dir / "ckpt2.safetensors").metadata.at("frugal.step"), "12");
  // Resumed from the first checkpoint again: the log reaches past it, so it is cut back to the
  // checkpoint's step and goes on from there (steps 5-12 once, not twice).
  ASSERT_EQ(run("train", tiny_train({"--resume", ckpt, "--epochs", "2", "--batch", "128",
                                     "--loss-log", log}))
                .code,
            kExitOk);
  EXPECT_EQ(logged_steps(log), header_and(1, 12));
  // A log that does not reach the checkpoint's step is another run's: replaced.
  {
    std::ofstream other(log);
    other << "step,loss\n1,2.5\n2,2.25\n";
  }
  ASSERT_EQ(run("train", tiny_train({"--resume", ckpt, "--epochs", "2", "--batch", "128",
                                     "--loss-log", log}))
                .code,
            kExitOk);
  EXPECT_EQ(logged_steps(log), header_and(5, 12));
}

// The loss log is written at every epoch's end, not only when the run ends: a run that stops
// (here at a save that fails at its first epoch's end) keeps the rows of the epochs it finished,
// and the memory log is written as the run leaves by the error.
TEST(TrainCommand, TheLossLogHoldsEveryFinishedEpochWhenTheRunDies) {
  ScratchDir dir;
  const std::string log = dir / "loss.csv";
  // --lr 1e30 diverges in the first steps; the first epoch's save then refuses the state.
  const CommandRun r =
      run("train", tiny_train({"--epochs", "2", "--lr", "1e30", "--loss-log", log, "--save",
                               dir / "ckpt.safetensors", "--memory-log", dir / "memory.csv"}));
  EXPECT_EQ(r.code, kExitError) << r.err;
  EXPECT_NE(r.err.find("was not written"), std::string::npos) << r.err;
  EXPECT_EQ(logged_steps(log), (std::vector<std::string>{"step", "1", "2", "3", "4"}));
  std::ifstream memory(dir / "memory.csv");
  std::string header, first_row;
  EXPECT_TRUE(std::getline(memory, header) && std::getline(memory, first_row))
      << "no memory log after the error";
}

// A --batch past the data is refused as such: the loaders used to allocate their seven buffers of
// the whole batch first (256 GiB here) and end in an out-of-memory error.
TEST(TrainCommand, ABatchLargerThanTheDataIsRefusedBeforeItsBuffersAreMade) {
  const CommandRun r = run(
      "train", {"--data", "synthetic", "--image-size", "256", "--limit", "16", "--test-limit", "16",
                "--batch", "1048576", "--width", "0.25", "--device", "cpu", "--workers", "0"});
  EXPECT_EQ(r.code, kExitUsage) << r.err;
  EXPECT_NE(r.err.find("--batch 1048576 is larger than the 16 training samples"), std::string::npos)
      << r.err;
}

// A folder with only t10k-*: eval used to open the training files too.
TEST(EvalCommand, NeedsOnlyTheTestFiles) {
  const std::string full = data::default_fashion_mnist_dir();
  if (!fs::exists(full + "/t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
  ScratchDir dir;
  for (const char* f : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    fs::create_symlink(full + "/" + f, dir / f);
  }
  models::ModelConfig mc;
  mc.num_classes = 10;
  mc.in_channels = 1;
  mc.width = 0.25;
  train::save_model(dir / "weights.safetensors", *models::create("mobilenet_v2", mc));
  const CommandRun r =
      run("eval", {"--load", dir / "weights.safetensors", "--data-dir", dir / "", "--width", "0.25",
                   "--image-size", "8", "--test-limit", "64", "--device", "cpu", "--workers", "0"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("on 64 samples"), std::string::npos) << r.out;
}

// nlohmann throws out_of_range, not parse_error, for a number past double's range in a header:
// whichever way the reader reports it, the command ends with a message naming it, never
// std::terminate.
TEST(EvalCommand, AJsonNumberOutOfRangeEndsWithAMessage) {
  ScratchDir dir;
  std::string json = R"({"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  bytes += json + std::string(4, '\0');
  {
    std::ofstream out(dir / "bad.safetensors", std::ios::binary);
    out << bytes;
  }
  const CommandRun r = run("eval", {"--load", dir / "bad.safetensors", "--data", "synthetic",
                                    "--device", "cpu", "--width", "0.25", "--image-size", "8"});
  EXPECT_NE(r.code, kExitOk);
  EXPECT_EQ(r.err.rfind("frugal eval", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("1e999"), std::string::npos) << r.err;
}
