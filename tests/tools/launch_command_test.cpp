// `frugal launch`'s command line: the launcher's flags before `--`, the ranks' command after it
// untouched, bad flags refused by name; and the command end to end with fake ranks, its exit
// code the failed rank's.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "tools/commands.h"
#include "tools/options.h"

using namespace frugal;
using namespace frugal::tools;

namespace {

std::string usage_error_of(const std::vector<std::string>& argv) {
  try {
    parse_launch_options(argv);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no UsageError";
}

}  // namespace

TEST(LaunchOptionsParse, FlagsBeforeTheDashesCommandAfter) {
  const LaunchCommand c =
      parse_launch_options({"--nproc", "4", "--master-port", "29500", "--master-addr", "10.0.0.1",
                            "--grace", "2.5", "--", "frugal", "train", "--nproc", "9", "--"});
  EXPECT_FALSE(c.help);
  EXPECT_EQ(c.options.nproc, 4);
  EXPECT_EQ(c.options.master_port, 29500);
  EXPECT_EQ(c.options.master_addr, "10.0.0.1");
  EXPECT_EQ(c.options.grace_seconds, 2.5);
  EXPECT_EQ(c.options.command, (std::vector<std::string>{"frugal", "train", "--nproc", "9", "--"}));
}

TEST(LaunchOptionsParse, DefaultsAndTorchrunsSpelling) {
  const LaunchCommand c = parse_launch_options({"--nproc-per-node=2", "--", "/bin/true"});
  EXPECT_EQ(c.options.nproc, 2);
  EXPECT_EQ(c.options.master_port, 0);  // chosen by the launcher
  EXPECT_EQ(c.options.master_addr, "127.0.0.1");
  EXPECT_EQ(c.options.grace_seconds, 10);
  EXPECT_TRUE(parse_launch_options({"--help"}).help);
}

TEST(LaunchOptionsParse, BadCommandLinesAreNamed) {
  const auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(usage_error_of({"--", "x"}), "launch: --nproc N is required"));
  EXPECT_TRUE(has(usage_error_of({"--nproc", "2"}), "launch: no command: put it after --"));
  EXPECT_TRUE(has(usage_error_of({"--nproc", "2", "--"}), "launch: no command"));
  EXPECT_TRUE(has(usage_error_of({"--nproc", "2", "frugal", "train"}), "launch: no command"));
  EXPECT_TRUE(has(usage_error_of({"--nproc", "0", "--", "x"}), "launch: --nproc expects"));
  EXPECT_TRUE(
      has(usage_error_of({"--nproc", "2", "--nproc-per-node", "2", "--", "x"}), "the same flag"));
  EXPECT_TRUE(
      has(usage_error_of({"--nproc", "2", "--master-port", "65536", "--", "x"}), "--master-port"));
  EXPECT_TRUE(has(usage_error_of({"--nproc", "2", "--grace", "-1", "--", "x"}), "--grace"));
  EXPECT_TRUE(has(usage_error_of({"--nproc", "2", "--gpus", "2", "--", "x"}), "--gpus"));
}

TEST(LaunchCommandRun, ExitsWithTheFailedRanksCode) {
  EXPECT_EQ(cmd_launch({"--nproc", "2", "--grace", "1", "--", "/bin/sh", "-c",
                        "[ \"$RANK\" = 1 ] && exit 4; exit 0"}),
            4);
  EXPECT_EQ(cmd_launch({"--nproc", "2", "--", "/bin/sh", "-c", "exit 0"}), 0);
}

TEST(LaunchCommandRun, FrugalMeansThisExecutable) {
  // This test program stands in for frugal: found through /proc/self/exe, not PATH (where a
  // search for `frugal` would fail with 127).
  const char* path = getenv("PATH");
  const std::string old_path = path != nullptr ? path : "";
  setenv("PATH", "/nonexistent", 1);
  const int code = cmd_launch({"--nproc", "1", "--", "frugal", "--gtest_filter=-*"});
  setenv("PATH", old_path.c_str(), 1);
  EXPECT_EQ(code, 0);
}
