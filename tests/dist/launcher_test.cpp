// dist::launch with fake ranks made of /bin/sh commands: the variables each rank sees, the whole
// group stopped when one rank fails (SIGTERM, then SIGKILL for a rank that ignores it), a rank's
// end named in words, signals to the launcher forwarded, bad options refused by name.
#include "dist/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "dist/rank_process.h"
#include "dist/signal_catcher.h"

using namespace frugal;
using namespace frugal::dist;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A variable of this process set or unset for one test, then put back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    value != nullptr ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_.c_str(), old_->c_str(), 1) : unsetenv(name_.c_str()); }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A fresh folder per test, shared with the ranks as $DIR.
class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "frugal-launch-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Options for nproc ranks running `script` under /bin/sh, their messages kept in log_.
  LaunchOptions sh(int nproc, const std::string& script) {
    LaunchOptions o;
    o.nproc = nproc;
    o.command = {"/bin/sh", "-c", script};
    o.extra_env = {{"DIR", dir_.string()}};
    o.log = &log_;
    return o;
  }

  bool exists(const std::string& name) const { return fs::exists(dir_ / name); }

  // Waits up to 10 s for the files to appear; false if they do not.
  bool wait_for(const std::vector<std::string>& names) const {
    const auto start = Clock::now();
    while (seconds_since(start) < 10) {
      bool all = true;
      for (const std::string& n : names) all = all && exists(n);
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  fs::path dir_;
  std::ostringstream log_;
};

std::map<std::string, std::string> read_env_file(const fs::path& path) {
  std::map<std::string, std::string> vars;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (auto eq = line.find('='); eq != std::string::npos) {
      vars[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return vars;
}

// Whether pid runs: a zombie does not (an orphan waits for init to reap it, which in a container
// may never happen).
bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  const char state = paren + 2 < stat.size() ? stat[paren + 2] : 'X';
  return state != 'Z' && state != 'X';
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_F(LaunchTest, EveryRankSeesItsTorchrunVariables) {
  ScopedEnv nvls("NCCL_NVLS_ENABLE", nullptr), omp("OMP_NUM_THREADS", nullptr);
  ScopedEnv inherited_rank("RANK", "99");  // a launcher under another launcher: replaced
  const LaunchResult r = launch(sh(3, "env > \"$DIR/env.$RANK\""));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_EQ(r.message, "");
  EXPECT_EQ(r.rank_exit_codes, (std::vector<int>{0, 0, 0}));
  std::string port;
  for (int rank = 0; rank < 3; ++rank) {
    auto vars = read_env_file(dir_ / ("env." + std::to_string(rank)));
    EXPECT_EQ(vars["RANK"], std::to_string(rank));
    EXPECT_EQ(vars["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(vars["WORLD_SIZE"], "3");
    EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(vars["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(vars["NCCL_NVLS_ENABLE"], "0");
    EXPECT_EQ(vars["OMP_NUM_THREADS"], std::to_string(default_omp_threads(3)));
    EXPECT_EQ(vars["DIR"], dir_.string());  // extra_env
    EXPECT_GT(std::stoi(vars["MASTER_PORT"]), 0);
    if (rank == 0) port = vars["MASTER_PORT"];
    EXPECT_EQ(vars["MASTER_PORT"], port) << "every rank must meet at the same port";
  }
  EXPECT_TRUE(contains(log_.str(), "OMP_NUM_THREADS=")) << log_.str();
}

TEST_F(LaunchTest, AGivenPortAndAddressAreUsed) {
  LaunchOptions o = sh(1, "env > \"$DIR/env.$RANK\"");
  o.master_port = 29500;
  o.master_addr = "10.1.2.3";
  EXPECT_EQ(launch(o).exit_code, 0);
  auto vars = read_env_file(dir_ / "env.0");
  EXPECT_EQ(vars["MASTER_PORT"], "29500");
  EXPECT_EQ(vars["MASTER_ADDR"], "10.1.2.3");
}

TEST(RankEnvironment, RankVariablesReplaceDefaultsGiveWay) {
  LaunchOptions o;
  o.nproc = 4;
  o.extra_env = {{"FOO", "bar"}, {"OMP_NUM_THREADS", "5"}};
  const std::vector<std::string> env =
      rank_environment({"PATH=/bin", "RANK=7", "NCCL_NVLS_ENABLE=1", "FOO=old"}, o, 2, 1234, 3);
  const std::vector<std::string> expected = {"PATH=/bin",          "RANK=2",
                                             "NCCL_NVLS_ENABLE=1", "FOO=bar",
                                             "WORLD_SIZE=4",       "LOCAL_RANK=2",
                                             "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1",
                                             "MASTER_PORT=1234",   "FRUGAL_LAUNCHED=1",
                                             "OMP_NUM_THREADS=5"};
  EXPECT_EQ(env, expected);
}

TEST(RankEnvironment, SeveralNodesNumberRanksFromTheNodesFirst) {
  LaunchOptions o;
  o.nproc = 2;
  o.nnodes = 3;
  o.node_rank = 1;
  o.master_addr = "node0";
  const std::vector<std::string> env = rank_environment({}, o, 1, 29500, 4);
  const std::vector<std::string> expected = {"RANK=3",
                                             "WORLD_SIZE=6",
                                             "LOCAL_RANK=1",
                                             "LOCAL_WORLD_SIZE=2",
                                             "MASTER_ADDR=node0",
                                             "MASTER_PORT=29500",
                                             "FRUGAL_LAUNCHED=1",  // Note [Ranks behind a wrapper]
                                             "NCCL_NVLS_ENABLE=0",
                                             "OMP_NUM_THREADS=4"};
  EXPECT_EQ(env, expected);
}

TEST_F(LaunchTest, ANodesFailedRankIsNamedByItsGlobalRank) {
  LaunchOptions o = sh(2, "if [ \"$LOCAL_RANK\" = 1 ]; then exit 3; fi; sleep 60");
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "10.0.0.1";
  o.master_port = 29500;
  const LaunchResult r = launch(o);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 3);
  EXPECT_NE(r.message.find("rank 3 (pid"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("stopped rank 2"), std::string::npos) << r.message;
  // Several nodes must agree on the port and name rank 0's node.
  o.master_port = 0;
  EXPECT_THROW(launch(o), Error);
  o.master_port = 29500;
  o.master_addr = "127.0.0.1";
  EXPECT_THROW(launch(o), Error);
  o.master_addr = "10.0.0.1";
  o.node_rank = 2;
  EXPECT_THROW(launch(o), Error);
}

TEST_F(LaunchTest, RanksExitingZeroAtDifferentTimesSucceed) {
  ScopedEnv omp("OMP_NUM_THREADS", "1");  // given: the launcher has nothing to say
  const LaunchResult r = launch(sh(3, "sleep 0.$RANK; exit 0"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_EQ(log_.str(), "");
}

TEST_F(LaunchTest, TheFirstFailureStopsTheOthers) {
  const auto start = Clock::now();
  const LaunchResult r = launch(sh(3, "if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 60"));
  EXPECT_LT(seconds_since(start), 20);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_TRUE(contains(r.message, "rank 1 (pid ")) << r.message;
  EXPECT_TRUE(contains(r.message, "exited with code 3; stopped ranks 0, 2")) << r.message;
  EXPECT_EQ(r.rank_exit_codes, (std::vector<int>{128 + SIGTERM, 3, 128 + SIGTERM}));
  EXPECT_TRUE(contains(log_.str(), "exited with code 3; stopping the other ranks")) << log_.str();
}

TEST_F(LaunchTest, TheStopReachesWhatARankStarted) {
  // rank 0's shell waits for a background sleep: SIGTERM to the rank's group ends both.
  const LaunchResult r =
      launch(sh(2,
                "if [ \"$RANK\" = 1 ]; then while [ ! -e \"$DIR/child\" ]; do "
                "sleep 0.01; done; exit 1; fi; sleep 60 & echo $! > "
                "\"$DIR/child.tmp\"; mv \"$DIR/child.tmp\" \"$DIR/child\"; wait"));
  EXPECT_EQ(r.failed_rank, 1);
  std::ifstream in(dir_ / "child");
  pid_t child = 0;
  ASSERT_TRUE(in >> child);
  const auto start = Clock::now();  // the signal reaches the orphaned sleep, not at once
  while (alive(child) && seconds_since(start) < 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(alive(child)) << "the rank's background sleep " << child << " survived";
}

TEST_F(LaunchTest, ARankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  LaunchOptions o = sh(2,
                       "if [ \"$RANK\" = 1 ]; then while [ ! -e \"$DIR/ready\" ]; do sleep 0.01; "
                       "done; exit 3; fi; trap '' TERM; touch \"$DIR/ready\"; sleep 60");
  o.grace_seconds = 0.5;
  const auto start = Clock::now();
  const LaunchResult r = launch(o);
  const double took = seconds_since(start);
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 5);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.rank_exit_codes[0], 128 + SIGKILL);
  EXPECT_TRUE(contains(r.message, "stopped rank 0; killed rank 0 with SIGKILL")) << r.message;
  EXPECT_TRUE(contains(log_.str(), "rank 0 still running 0.5 s after the stop signal: SIGKILL"))
      << log_.str();
}

TEST_F(LaunchTest, ARankKilledByASignalIsNamed) {
  const LaunchResult r = launch(sh(1, "kill -9 $$"));
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_EQ(r.failed_rank, 0);
  EXPECT_TRUE(contains(r.message, "was killed by signal 9 (SIGKILL)")) << r.message;
}

TEST_F(LaunchTest, ACommandThatCannotRunExits127WithTheReason) {
  LaunchOptions o = sh(1, "");
  o.command = {"frugal-no-such-program-42", "--flag"};
  ::testing::internal::CaptureStderr();  // fd 2, which the child inherits
  const LaunchResult r = launch(o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.failed_rank, 0);
  EXPECT_TRUE(contains(err,
                       "frugal launch: cannot run 'frugal-no-such-program-42': No such file or "
                       "directory\n"))
      << err;
  EXPECT_TRUE(contains(r.message, "exited with code 127")) << r.message;
}

TEST_F(LaunchTest, SigtermToTheLauncherIsForwardedToEveryRank) {
  struct sigaction before {};
  sigaction(SIGTERM, nullptr, &before);
  // 2>/dev/null: the shell's "Terminated" when the signal also ends its sleep.
  const std::string script =
      "exec 2>/dev/null; trap 'echo got > \"$DIR/term.$RANK\"; exit 0' TERM; "
      "touch \"$DIR/ready.$RANK\"; while :; do sleep 0.05; done";
  std::thread sender([&] {
    if (wait_for({"ready.0", "ready.1"})) kill(getpid(), SIGTERM);
  });
  const LaunchResult r = launch(sh(2, script));
  sender.join();
  EXPECT_TRUE(exists("term.0") && exists("term.1")) << "each rank's TERM trap leaves a marker";
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_EQ(r.message, "interrupted by SIGTERM; stopped ranks 0, 1");
  EXPECT_EQ(r.rank_exit_codes, (std::vector<int>{0, 0}));
  struct sigaction after {};
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler) << "launch() must put the old handler back";
}

TEST_F(LaunchTest, ASecondSignalKillsWithoutWaitingForTheGracePeriod) {
  LaunchOptions o = sh(2, "trap '' INT TERM; touch \"$DIR/ready.$RANK\"; sleep 60");
  o.grace_seconds = 60;
  std::thread sender([&] {
    if (!wait_for({"ready.0", "ready.1"})) return;
    kill(getpid(), SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(getpid(), SIGINT);
  });
  const auto start = Clock::now();
  const LaunchResult r = launch(o);
  sender.join();
  EXPECT_LT(seconds_since(start), 10);
  EXPECT_EQ(r.exit_code, 128 + SIGINT);
  EXPECT_EQ(r.rank_exit_codes, (std::vector<int>{128 + SIGKILL, 128 + SIGKILL}));
  EXPECT_EQ(r.message, "interrupted by SIGINT; stopped ranks 0, 1; killed ranks 0, 1 with SIGKILL");
}

TEST_F(LaunchTest, ASignalIgnoredAtTheStartStaysIgnored) {
  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &before);  // as a script's `frugal launch ... &` starts
  std::thread sender([&] {
    if (wait_for({"ready.0"})) kill(getpid(), SIGINT);
  });
  const LaunchResult r = launch(sh(1, "touch \"$DIR/ready.$RANK\"; sleep 0.3; exit 0"));
  sender.join();
  sigaction(SIGINT, &before, nullptr);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(log_.str(), "");
}

TEST(LaunchOptionsCheck, BadOptionsAreRefusedByName) {
  auto error_of = [](const LaunchOptions& o) -> std::string {
    try {
      launch(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  LaunchOptions good;
  good.command = {"/bin/true"};
  LaunchOptions o = good;
  o.nproc = 0;
  EXPECT_TRUE(contains(error_of(o), "launch: nproc must be from 1")) << error_of(o);
  o = good;
  o.command = {};
  EXPECT_TRUE(contains(error_of(o), "launch: the command is empty")) << error_of(o);
  o = good;
  o.master_port = 70000;
  EXPECT_TRUE(contains(error_of(o), "launch: master_port must be")) << error_of(o);
  o = good;
  o.grace_seconds = -1;
  EXPECT_TRUE(contains(error_of(o), "launch: grace_seconds must be")) << error_of(o);
  o = good;
  o.extra_env = {{"WORLD_SIZE", "8"}};
  EXPECT_TRUE(contains(error_of(o), "extra_env may not set WORLD_SIZE")) << error_of(o);
}

TEST(RankExit, StatusesInWords) {
  EXPECT_EQ(describe_exit(1, 1234, 3 << 8), "rank 1 (pid 1234) exited with code 3");
  EXPECT_EQ(describe_exit(0, 99, SIGKILL), "rank 0 (pid 99) was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(exit_code_of(3 << 8), 3);
  EXPECT_EQ(exit_code_of(SIGTERM), 128 + SIGTERM);
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
}

TEST(SignalCatcherTest, OneAtATime) {
  SignalCatcher first;
  EXPECT_THROW(SignalCatcher second, Error);
}

TEST(ChooseFreePort, GivesAPortAboveZero) {
  const int port = choose_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}
