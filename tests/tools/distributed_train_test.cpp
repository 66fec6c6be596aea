// `frugal train` as the ranks of a data-parallel job on the CPU: two processes of the real tool
// started by frugal launch's engine, reducing over sockets; and `--gpus N`'s checks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/printed_accuracy.h"
#include "dist/launcher.h"
#include "kernels/context.h"
#include "models/registry.h"
#include "tools/options.h"
#include "tools/run_command.h"
#include "train/checkpoint.h"
#include "train/file_test_util.h"

using namespace frugal;
using frugal::test::final_accuracy;
using frugal::test::ScratchDir;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

#ifdef FRUGAL_TOOL
// `frugal train` with `args` as two CPU ranks, one thread each, each rank's output to `dir`/out.R
// (the shell redirects, then becomes the tool).
dist::LaunchResult launch_two_cpu_ranks(const ScratchDir& dir,
                                        const std::vector<std::string>& args) {
  dist::LaunchOptions o;
  o.nproc = 2;
  o.command = {"/bin/sh", "-c", "exec \"$0\" \"$@\" > \"" + dir / "out." + "$RANK\" 2>&1",
               FRUGAL_TOOL, "train"};
  o.command.insert(o.command.end(), args.begin(), args.end());
  o.extra_env = {{"OMP_NUM_THREADS", "1"}, {"FRUGAL_DIST_TIMEOUT", "60"}};
  o.log = nullptr;
  return dist::launch(o);
}
#endif

// Two CPU ranks, one thread each, train a quarter-width MobileNetV2 on 512 synthetic 16x16
// images (16 per rank a step) with synchronised batch norm, and rank 0 saves.
TEST(DistributedTrain, TwoCpuRanksTrainOneModelThatRankZeroReportsAndSaves) {
#ifndef FRUGAL_TOOL
  GTEST_SKIP() << "the frugal tool is not built (FRUGAL_BUILD_PROGRAMS off)";
#else
  ScratchDir dir;
  const dist::LaunchResult r = launch_two_cpu_ranks(dir, {"--device",
                                                          "cpu",
                                                          "--data",
                                                          "synthetic",
                                                          "--limit",
                                                          "512",
                                                          "--test-limit",
                                                          "127",
                                                          "--image-size",
                                                          "16",
                                                          "--width",
                                                          "0.25",
                                                          "--batch",
                                                          "16",
                                                          "--epochs",
                                                          "2",
                                                          "--workers",
                                                          "0",
                                                          "--sync-bn",
                                                          "--save",
                                                          dir / "ckpt.safetensors",
                                                          "--loss-log",
                                                          dir / "loss.csv"});
  const std::string out0 = read_file(dir / "out.0"), out1 = read_file(dir / "out.1");
  ASSERT_EQ(r.exit_code, 0) << r.message << "\nrank 0:\n" << out0 << "\nrank 1:\n" << out1;
  EXPECT_NE(out0.find("batch 16 per rank on 2 ranks (socket)"), std::string::npos) << out0;
  EXPECT_NE(out0.find("sync-bn: "), std::string::npos) << out0;
  EXPECT_NE(out0.find("epoch 2/2: train loss"), std::string::npos) << out0;
  EXPECT_NE(out0.find("replicas on 2 ranks: identical"), std::string::npos) << out0;
  // Rank 1 trains as much but prints nothing: no header, no epochs, no progress bar.
  EXPECT_EQ(out1.find("training "), std::string::npos) << out1;
  EXPECT_EQ(out1.find("epoch"), std::string::npos) << out1;
  // The loss of every step, averaged over the ranks, written once by rank 0.
  std::istringstream log(read_file(dir / "loss.csv"));
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line, "step,loss");
  int steps = 0;
  while (std::getline(log, line)) {
    ++steps;
    EXPECT_EQ(line.substr(0, line.find(',')), std::to_string(steps));
    const double loss = std::stod(line.substr(line.find(',') + 1));
    EXPECT_TRUE(loss > 0 && loss < 10) << line;
  }
  EXPECT_EQ(steps, 2 * 16);
  // The one checkpoint loads into a single-process model.
  models::ModelConfig mc;
  mc.width = 0.25;
  mc.num_classes = 10;
  mc.in_channels = 1;
  auto model = models::create("mobilenet_v2", mc);
  train::TrainingState st = train::load_checkpoint(dir / "ckpt.safetensors", *model, nullptr);
  EXPECT_EQ(st.epoch, 2);
  EXPECT_EQ(st.step, 2 * 16);  // 512 samples / 2 ranks / 16 a step, each epoch
  // The accuracy rank 0 printed is over the 127 test samples once: rank 1's shard ends in a
  // repeat of rank 0's first sample, which is not counted, so one process evaluating the saved
  // weights prints the same accuracy.
  ::testing::internal::CaptureStdout();
  const int eval_code = tools::run_command(
      "eval", {"--load", dir / "ckpt.safetensors", "--device", "cpu", "--data", "synthetic",
               "--test-limit", "127", "--image-size", "16", "--width", "0.25", "--workers", "0"});
  const std::string eval_out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(eval_code, 0) << eval_out;
  const std::string printed = final_accuracy(out0), evaluated = final_accuracy(eval_out);
  ASSERT_FALSE(evaluated.empty()) << eval_out;
  EXPECT_EQ(printed, evaluated) << out0 << "\n" << eval_out;
#endif
}

TEST(DistributedTrain, GpusNeedsThatManyGpusAndRanksRunTrainWithoutIt) {
  if (kernels::cuda_device_count() < 3) {
    ::testing::internal::CaptureStderr();
    const int code = tools::run_command("train", {"--gpus", "3", "--device", "cpu"});
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, 2) << err;
    EXPECT_NE(err.find("--gpus 3 needs as many GPUs"), std::string::npos) << err;
  }
  EXPECT_EQ(tools::rank_args_for_gpus({"--gpus", "2", "--batch", "64"}),
            (std::vector<std::string>{"train", "--batch", "64", "--device", "cuda"}));
  EXPECT_EQ(tools::rank_args_for_gpus({"--gpus=4", "--device=cuda", "--sync-bn"}),
            (std::vector<std::string>{"train", "--device=cuda", "--sync-bn"}));
  EXPECT_THROW(tools::rank_args_for_gpus({"--gpus", "2", "--device", "cpu"}), tools::UsageError);
}

// What cannot run as one rank of several is refused before any rank waits for another.
TEST(DistributedTrain, ARankRefusesWhatRanksCannotShare) {
  const std::vector<std::pair<const char*, const char*>> rank1 = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}};
  for (const auto& [name, value] : rank1) setenv(name, value, 1);
  auto refused = [](std::vector<std::string> args) {
    ::testing::internal::CaptureStderr();
    const int code = tools::run_command("train", args);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, 2) << err;
    return err;
  };
  EXPECT_NE(refused({"--device", "cpu", "--oom-recover"}).find("--oom-recover does not run"),
            std::string::npos);
  EXPECT_NE(refused({"--device", "cpu", "--graph"}).find("--graph does not run"),
            std::string::npos);
  EXPECT_NE(refused({"--device", "cpu", "--gpus", "2"}).find("--gpus starts ranks itself"),
            std::string::npos);
  for (const auto& [name, value] : rank1) unsetenv(name);
}

// frugal estimate --gpus N: one rank's step, DataParallel's buckets counted. ResNet-18 on two
// tiny images peaks at the end of backward, where the buckets are: the prediction grows, by less
// than the buckets plus the averaged gradients (two copies of the parameters).
TEST(DistributedTrain, EstimateForSeveralGpusCountsTheBuckets) {
  ScratchDir dir;
  auto peak = [&](const std::string& gpus, int64_t* parameters) {
    ::testing::internal::CaptureStdout();
    const int code = tools::run_command(
        "estimate", {"--model", "resnet18", "--batch", "2", "--input", "3x32x32", "--classes", "10",
                     "--precision", "f32", "--gpus", gpus, "--json", dir / "e.json"});
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(code, 0) << out;
    const std::string json = read_file(dir / "e.json");
    auto number_after = [&](const std::string& key) {
      const size_t at = json.find("\"" + key + "\": ");
      EXPECT_NE(at, std::string::npos) << key;
      return std::stoll(json.substr(at + key.size() + 4));
    };
    *parameters = number_after("parameters");
    if (gpus != "1") {
      EXPECT_NE(out.find("batch 2 per GPU of " + gpus), std::string::npos) << out;
    }
    return number_after("peak_allocated_bytes");
  };
  int64_t params = 0;
  const int64_t one = peak("1", &params), two = peak("2", &params);
  EXPECT_GT(two, one);
  EXPECT_LE(two, one + 2 * params);
}

}  // namespace

// --batch is per rank, so a batch past a rank's shard is refused naming the shard, not the whole
// training set (40 samples on 2 ranks are 20 each: a batch of 32 fits the set but not a shard).
TEST(DistributedTrain, ABatchLargerThanARanksShardIsRefusedNamingTheShard) {
#ifndef FRUGAL_TOOL
  GTEST_SKIP() << "the frugal tool is not built (FRUGAL_BUILD_PROGRAMS off)";
#else
  ScratchDir dir;
  const dist::LaunchResult r = launch_two_cpu_ranks(
      dir, {"--device", "cpu", "--data", "synthetic", "--limit", "40", "--batch", "32",
            "--image-size", "8", "--width", "0.25", "--workers", "0"});
  EXPECT_NE(r.exit_code, 0);
  const std::string out0 = read_file(dir / "out.0");
  EXPECT_NE(out0.find("--batch 32 is larger than the 20 training samples of each of the 2 ranks "
                      "(40 in all)"),
            std::string::npos)
      << out0;
#endif
}

// With SyncBN a batch of one row a rank trains: the statistics are over every rank's rows. The
// check that refuses one-row slices in one process (a 1x1 BatchNorm) must not refuse it here;
// without --sync-bn it does, naming the flags.
TEST(DistributedTrain, OneRowARankTrainsWithSyncBnAndIsRefusedWithout) {
#ifndef FRUGAL_TOOL
  GTEST_SKIP() << "the frugal tool is not built (FRUGAL_BUILD_PROGRAMS off)";
#else
  const std::vector<std::string> args{
      "--device", "cpu", "--data",       "synthetic", "--limit", "8",    "--test-limit", "8",
      "--batch",  "1",   "--image-size", "8",         "--width", "0.25", "--workers",    "0"};
  ScratchDir synced;
  std::vector<std::string> with_sync = args;
  with_sync.push_back("--sync-bn");
  const dist::LaunchResult ok = launch_two_cpu_ranks(synced, with_sync);
  EXPECT_EQ(ok.exit_code, 0) << read_file(synced / "out.0");
  ScratchDir local;
  const dist::LaunchResult refused = launch_two_cpu_ranks(local, args);
  EXPECT_NE(refused.exit_code, 0);
  const std::string out0 = read_file(local / "out.0");
  EXPECT_NE(out0.find("--batch 1 trains on slices of 1 row"), std::string::npos) << out0;
#endif
}

namespace {

// The first child's pid listed in /proc/<pid>/task/<pid>/children, or 0.
pid_t first_child_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t child = 0;
  in >> child;
  return child;
}

// Running (not exited, not a zombie waiting to be reaped).
bool running(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Polls `ready` every 20 ms for up to `seconds`.
template <typename Ready>
bool wait_until(Ready ready, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ready();
}

}  // namespace

// Note [Ranks behind a wrapper]: a trainer run by a shell script without exec is the launcher's
// grandchild. Killing the launcher with SIGKILL killed the shell (PR_SET_PDEATHSIG) and left the
// trainer running; it now dies with the shell.
TEST(DistributedTrain, ATrainerBehindAWrapperDiesWithAKilledLauncher) {
#ifndef FRUGAL_TOOL
  GTEST_SKIP() << "the frugal tool is not built (FRUGAL_BUILD_PROGRAMS off)";
#else
  ScratchDir dir;
  const std::string shell_pid = dir / "shell.pid";
  const std::string script = "echo $$ > '" + shell_pid +
                             "'; \"$0\" train --device cpu --data synthetic --limit 256 "
                             "--epochs 100000 --image-size 8 --width 0.25 --batch 64 --workers 0 "
                             "> /dev/null 2>&1; echo the trainer ended";
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    execl(FRUGAL_TOOL, FRUGAL_TOOL, "launch", "--nproc", "1", "--", "/bin/sh", "-c", script.c_str(),
          FRUGAL_TOOL, static_cast<char*>(nullptr));
    _exit(127);
  }
  pid_t shell = 0, trainer = 0;
  const bool started = wait_until(
      [&] {
        std::ifstream in(shell_pid);
        if (shell == 0) in >> shell;
        if (shell != 0) trainer = first_child_of(shell);
        return trainer != 0;
      },
      30);
  // Past main's start (where it asks to die with its parent): it is training by then.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  ASSERT_TRUE(started) << "the wrapper or the trainer did not start";
  const bool ended = wait_until([&] { return !running(trainer) && !running(shell); }, 15);
  if (running(trainer)) kill(trainer, SIGKILL);  // never leave it behind
  EXPECT_TRUE(ended) << "the trainer (pid " << trainer << ") outlived its killed launcher";
#endif
}
