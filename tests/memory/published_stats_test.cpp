// Published per-process statistics (Note [Published stats]): the file's text round trip, the
// atomic write, publish_stats' numbers and rate limit, and the removal of dead processes' files.
#include "memory/published_stats.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "memory/allocator.h"

using namespace frugal;
using namespace frugal::memory;
namespace fs = std::filesystem;

namespace {

// A fresh $FRUGAL_STATS_DIR for one test, removed afterwards.
class StatsDir {
 public:
  StatsDir() {
    char tmpl[] = "/tmp/frugal-stats-test-XXXXXX";
    path_ = mkdtemp(tmpl);
    setenv("FRUGAL_STATS_DIR", path_.c_str(), 1);
  }
  ~StatsDir() {
    unsetenv("FRUGAL_STATS_DIR");
    fs::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

PublishedStats sample(int64_t pid) {
  PublishedStats s;
  s.pid = pid;
  s.program = "train_mnist";
  s.device = "cuda:1";
  s.step = 1234;
  s.time = 1712345678.25;
  s.allocated = 100;
  s.allocated_peak = 300;
  s.reserved = 2 << 20;
  s.reserved_peak = 22 << 20;
  return s;
}

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

}  // namespace

TEST(PublishedStats, TextRoundTrip) {
  const PublishedStats s = sample(42);
  const std::string text = format_published_stats(s);
  EXPECT_NE(text.find("\nreserved_peak=23068672\n"), std::string::npos) << text;
  const std::optional<PublishedStats> back = parse_published_stats(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->pid, 42);
  EXPECT_EQ(back->program, "train_mnist");
  EXPECT_EQ(back->device, "cuda:1");
  EXPECT_EQ(back->step, 1234);
  EXPECT_DOUBLE_EQ(back->time, 1712345678.25);
  EXPECT_EQ(back->allocated, 100);
  EXPECT_EQ(back->allocated_peak, 300);
  EXPECT_EQ(back->reserved, 2 << 20);
  EXPECT_EQ(back->reserved_peak, 22 << 20);
  // Unknown keys are ignored; a missing or malformed field rejects the file.
  EXPECT_TRUE(parse_published_stats(text + "future_key=7\n").has_value());
  EXPECT_FALSE(parse_published_stats("pid=42\ndevice=cpu\n").has_value());
  std::string bad = text;
  bad.replace(bad.find("allocated=100"), 13, "allocated=1x0");
  EXPECT_FALSE(parse_published_stats(bad).has_value());
  EXPECT_FALSE(parse_published_stats("").has_value());
}

TEST(PublishedStats, PublishWritesThisProcesssNumbersAndRateLimits) {
  StatsDir dir;
  EXPECT_EQ(published_stats_dir(), dir.path());
  DataPtr p = cpu_allocator().allocate(5000);
  const MemoryStats m = cpu_allocator().stats();
  publish_stats(Device::cpu(), 7, /*force=*/true);
  std::vector<PublishedStats> all = read_published_stats();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].pid, getpid());
  EXPECT_EQ(all[0].program, program_invocation_short_name);
  EXPECT_EQ(all[0].device, "cpu");
  EXPECT_EQ(all[0].step, 7);
  EXPECT_EQ(all[0].allocated, m.allocated_bytes.current);
  EXPECT_EQ(all[0].allocated_peak, m.allocated_bytes.peak);
  EXPECT_EQ(all[0].reserved, m.reserved_bytes.current);
  EXPECT_EQ(all[0].reserved_peak, m.reserved_bytes.peak);
  EXPECT_GT(all[0].time, 1.6e9);
  // Within the interval an unforced call writes nothing; a forced one does.
  publish_stats(Device::cpu(), 8);
  EXPECT_EQ(read_published_stats()[0].step, 7);
  publish_stats(Device::cpu(), 9, /*force=*/true);
  EXPECT_EQ(read_published_stats()[0].step, 9);
  usleep(static_cast<useconds_t>(kPublishIntervalSeconds * 1e6) + 50000);
  publish_stats(Device::cpu(), 10);
  EXPECT_EQ(read_published_stats()[0].step, 10);
  // Written by rename: no temporary file stays behind, and only the owner may read the directory.
  EXPECT_FALSE(fs::exists(dir.path() + "/" + std::to_string(getpid()) + ".tmp"));
  struct stat st {};
  ASSERT_EQ(stat(dir.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(PublishedStats, ReadingRemovesDeadProcessesAndSkipsJunk) {
  StatsDir dir;
  const pid_t dead = dead_pid();
  ASSERT_TRUE(write_published_stats(dir.path(), sample(getpid())));
  ASSERT_TRUE(write_published_stats(dir.path(), sample(dead)));
  const std::string dead_tmp = dir.path() + "/" + std::to_string(dead) + ".tmp";
  std::ofstream(dead_tmp) << "pid=";                       // a writer died mid-write
  std::ofstream(dir.path() + "/notes.txt") << "not ours";  // left alone
  std::ofstream(dir.path() + "/1.stats") << "garbage";     // pid 1 lives: kept, skipped
  // A dead pid's name on files frugal did not write (a shared FRUGAL_STATS_DIR): they used to
  // be removed.
  const pid_t dead2 = dead_pid();
  const std::string others_tmp = dir.path() + "/" + std::to_string(dead2) + ".tmp";
  const std::string others_stats = dir.path() + "/" + std::to_string(dead2) + ".stats";
  std::ofstream(others_tmp) << "my notes";
  // A FIFO under such a name: skipped, where opening it blocked for good.
  const pid_t dead3 = dead_pid();
  const std::string fifo = dir.path() + "/" + std::to_string(dead3) + ".tmp";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(others_stats) << format_published_stats(sample(dead));  // another pid's text
  const std::vector<PublishedStats> all = read_published_stats(dir.path());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].pid, getpid());
  EXPECT_EQ(all[0].reserved_peak, 22 << 20);
  EXPECT_FALSE(fs::exists(dir.path() + "/" + std::to_string(dead) + ".stats"));
  EXPECT_FALSE(fs::exists(dead_tmp));
  EXPECT_TRUE(fs::exists(dir.path() + "/notes.txt"));
  EXPECT_TRUE(fs::exists(dir.path() + "/1.stats"));
  EXPECT_TRUE(fs::exists(others_tmp));
  EXPECT_TRUE(fs::exists(others_stats));
  EXPECT_TRUE(fs::exists(fifo));
  EXPECT_TRUE(read_published_stats(dir.path() + "/missing").empty());
}

TEST(PublishedStats, WriteMakesTheDirectoryAndFailsCleanly) {
  StatsDir dir;
  const std::string sub = dir.path() + "/sub";
  EXPECT_TRUE(write_published_stats(sub, sample(getpid())));
  EXPECT_EQ(read_published_stats(sub).size(), 1u);
  std::ofstream(dir.path() + "/file") << "x";
  EXPECT_FALSE(write_published_stats(dir.path() + "/file", sample(getpid())));
}
