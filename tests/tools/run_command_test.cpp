// Every exception a command can throw becomes one message naming the command and an exit code of
// its kind (tools/run_command.h): no std::terminate, whatever the standard library throws.
#include "tools/run_command.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <new>
#include <system_error>

#include "base/error.h"
#include "tools/args.h"

using namespace frugal;
using namespace frugal::tools;

namespace {

struct Outcome {
  int code = -1;
  std::string message;  // what was printed to the error stream
};

Outcome guarded(const std::function<int()>& body) {
  std::FILE* err = std::tmpfile();
  Outcome out;
  out.code = run_guarded("train", body, err);
  std::rewind(err);
  char buf[4096];
  const size_t n = std::fread(buf, 1, sizeof buf, err);
  out.message.assign(buf, n);
  std::fclose(err);
  return out;
}

void expect_outcome(const Outcome& o, int code, const std::vector<std::string>& parts) {
  EXPECT_EQ(o.code, code) << o.message;
  EXPECT_EQ(o.message.rfind("frugal train", 0), 0u) << o.message;
  for (const auto& p : parts)
    EXPECT_NE(o.message.find(p), std::string::npos) << p << " not in: " << o.message;
}

}  // namespace

TEST(RunGuarded, EachKindOfExceptionHasItsMessageAndExitCode) {
  EXPECT_EQ(guarded([] { return 0; }).code, kExitOk);
  expect_outcome(guarded([]() -> int { throw UsageError("train: --batch expects ..."); }),
                 kExitUsage, {"--batch"});
  expect_outcome(guarded([]() -> int { throw OutOfMemoryError("cuda:0: 2 GiB requested"); }),
                 kExitOutOfMemory, {"out of memory", "2 GiB"});
  expect_outcome(guarded([]() -> int { throw Error("load_checkpoint: 'x': bad header"); }),
                 kExitError, {"error", "bad header"});
  expect_outcome(guarded([]() -> int { throw std::bad_alloc(); }), kExitOutOfMemory,
                 {"out of host memory"});
  // A directory where a file should be, a symlink loop, an unreadable folder.
  expect_outcome(guarded([]() -> int {
                   throw std::filesystem::filesystem_error(
                       "directory_iterator", "/data/loop",
                       std::make_error_code(std::errc::too_many_symbolic_link_levels));
                 }),
                 kExitSystem, {"file system error", "/data/loop"});
  // Thread creation failing.
  expect_outcome(guarded([]() -> int {
                   throw std::system_error(
                       std::make_error_code(std::errc::resource_unavailable_try_again), "thread");
                 }),
                 kExitSystem, {"system error", "thread"});
  // A JSON number out of range, a stoi overflow: standard exceptions frugal did not expect.
  expect_outcome(guarded([]() -> int { throw std::out_of_range("stoi"); }), kExitInternal,
                 {"unexpected error", "stoi"});
  expect_outcome(guarded([]() -> int { throw 42; }), kExitInternal, {"unexpected error"});
}

TEST(RunCommand, BadCommandLinesAreUsageErrors) {
  EXPECT_EQ(run_command("nonsense", {}), kExitUsage);
  EXPECT_EQ(run_command("train", {"--batch", "nan"}), kExitUsage);
  EXPECT_EQ(run_command("train", {"--device", "cuda:99999999999999999999"}), kExitUsage);
  EXPECT_EQ(run_command("compare", {"--input", "3x18446744073709551617x1"}), kExitUsage);
  EXPECT_EQ(run_command("estimate", {"--memory-budget", "17179869184GiB", "--max-batch"}),
            kExitUsage);
  EXPECT_EQ(run_command("smi", {"--count", "0"}), kExitUsage);
}

// A rank of a data-parallel job says which rank it is: the ranks' messages share one terminal.
TEST(RunGuarded, ARanksMessageNamesTheRank) {
  const std::vector<std::pair<const char*, const char*>> rank1 = {
      {"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}};
  for (const auto& [name, value] : rank1) setenv(name, value, 1);
  const Outcome o = guarded([]() -> int { throw Error("socket: receiving from rank 2 failed"); });
  for (const auto& [name, value] : rank1) unsetenv(name);
  EXPECT_EQ(o.message.rfind("[rank 1/4] frugal train: error: socket: receiving from rank 2", 0), 0u)
      << o.message;
}
