// Note [Save targets]: what a save refuses before writing (directories, device nodes, FIFOs,
// missing folders, links to nowhere), links written through rather than replaced, temporary
// names no two writers share, and a temporary file left by a killed process harmless.
#include "train/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "core/factory.h"
#include "file_test_util.h"
#include "train/safetensors.h"

using namespace frugal;
using frugal::test::error_of;
using frugal::test::expect_mentions;
using frugal::test::read_bytes;
using frugal::test::ScratchDir;
using frugal::test::ScratchFile;
using frugal::test::write_bytes;
namespace fs = std::filesystem;

namespace {

train::NamedTensors tensors_of(float v) { return {{"w", full({3}, v)}}; }

float first_value(const std::string& path) {
  return train::load_safetensors(path).tensors.at(0).second.data<float>()[0];
}

}  // namespace

TEST(SaveTarget, RefusesDirectoriesDevicesFifosAndMissingFolders) {
  ScratchDir dir;
  expect_mentions(error_of([&] { train::checked_save_target(dir / ""); }), {"a directory"});
  expect_mentions(error_of([&] { train::checked_save_target("/dev/null"); }),
                  {"/dev/null", "not a regular file"});
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  expect_mentions(error_of([&] { train::checked_save_target(dir / "fifo"); }),
                  {"fifo", "not a regular file"});
  expect_mentions(error_of([&] { train::checked_save_target(dir / "no/such/ckpt"); }),
                  {"no/such", "does not exist"});
  write_bytes(dir / "plain", "x");
  expect_mentions(error_of([&] { train::checked_save_target(dir / "plain/ckpt"); }),
                  {"plain/ckpt"});
  expect_mentions(error_of([&] { train::checked_save_target(""); }), {"empty"});
  // Nothing was written: the refusals happen before any file is created.
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"fifo", "plain"}));
  EXPECT_EQ(read_bytes("/dev/null"), "");
}

TEST(SaveTarget, WritesThroughASymlinkAndKeepsTheLink) {
  ScratchDir dir;
  train::save_safetensors(dir / "real.safetensors", tensors_of(1.0f));
  fs::create_symlink(dir / "real.safetensors", dir / "link.safetensors");
  train::save_safetensors(dir / "link.safetensors", tensors_of(2.0f));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "link.safetensors")));
  EXPECT_EQ(first_value(dir / "real.safetensors"), 2.0f);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"link.safetensors", "real.safetensors"}));
}

TEST(SaveTarget, RefusesSymlinkLoopsAndDanglingLinks) {
  ScratchDir dir;
  fs::create_symlink(dir / "b", dir / "a");
  fs::create_symlink(dir / "a", dir / "b");
  expect_mentions(error_of([&] { train::save_safetensors(dir / "a", tensors_of(1.0f)); }),
                  {"symbolic link", "/a"});
  fs::create_symlink(dir / "missing", dir / "dangling");
  expect_mentions(error_of([&] { train::save_safetensors(dir / "dangling", tensors_of(1.0f)); }),
                  {"symbolic link", "dangling"});
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "a")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir / "missing")));
}

TEST(AtomicFile, TwoWritersOfOnePathUseDifferentTemporaryFiles) {
  ScratchDir dir;
  train::AtomicFile a(dir / "ckpt", "test"), b(dir / "ckpt", "test");
  EXPECT_NE(a.temp_path(), b.temp_path());
  a.write("aaaa", 4);
  b.write("bb", 2);
  a.commit();
  EXPECT_EQ(read_bytes(dir / "ckpt"), "aaaa");
  b.commit();  // the other run's file is whole too: the last rename wins
  EXPECT_EQ(read_bytes(dir / "ckpt"), "bb");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"ckpt"}));
}

TEST(AtomicFile, WithoutCommitTheTargetIsUntouchedAndNothingIsLeft) {
  ScratchDir dir;
  write_bytes(dir / "ckpt", "old");
  {
    train::AtomicFile f(dir / "ckpt", "test");
    f.write("new bytes", 9);
  }
  EXPECT_EQ(read_bytes(dir / "ckpt"), "old");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"ckpt"}));
}

// Two threads (as two runs would) saving to one path over and over: every save succeeds and the
// file is always one of them, whole.
TEST(AtomicFile, ConcurrentSavesToOnePathAllSucceedWhole) {
  ScratchDir dir;
  const std::string path = dir / "ckpt.safetensors";
  auto saver = [&](float v, int* failures) {
    for (int i = 0; i < 25; ++i) {
      try {
        train::save_safetensors(path, tensors_of(v));
      } catch (const Error&) {
        ++*failures;
      }
    }
  };
  int failures_a = 0, failures_b = 0;
  std::thread a(saver, 1.0f, &failures_a), b(saver, 2.0f, &failures_b);
  a.join();
  b.join();
  EXPECT_EQ(failures_a, 0);
  EXPECT_EQ(failures_b, 0);
  const float v = first_value(path);
  EXPECT_TRUE(v == 1.0f || v == 2.0f) << v;
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"ckpt.safetensors"}));
}

// A killed process leaves its temporary file behind (the old fixed name "<path>.tmp" here as a
// folder, which a fixed name could never be opened over): the next save neither fails nor
// touches it.
TEST(AtomicFile, ALeftoverTemporaryFileDoesNotBreakTheNextSave) {
  ScratchDir dir;
  const std::string path = dir / "ckpt.safetensors";
  train::save_safetensors(path, tensors_of(1.0f));
  fs::create_directory(path + ".tmp");
  write_bytes(path + ".tmp.1.0.00000000", "half a checkpoint");
  train::save_safetensors(path, tensors_of(2.0f));
  EXPECT_EQ(first_value(path), 2.0f);
  EXPECT_EQ(read_bytes(path + ".tmp.1.0.00000000"), "half a checkpoint");
}

// The saved file takes the target's place with the target's permissions: a private checkpoint
// stays private. A new file gets the umask's.
TEST(AtomicFile, AReplacedFileKeepsItsMode) {
  ScratchDir dir;
  for (const mode_t mode : {mode_t{0600}, mode_t{0640}, mode_t{0755}}) {
    write_bytes(dir / "ckpt", "old");
    ASSERT_EQ(::chmod((dir / "ckpt").c_str(), mode), 0);
    train::AtomicFile f(dir / "ckpt", "test");
    f.write("new", 3);
    f.commit();
    struct stat st {};
    ASSERT_EQ(::stat((dir / "ckpt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, mode);
    EXPECT_EQ(read_bytes(dir / "ckpt"), "new");
  }
}

// A write-protected file is refused as opening it to write would be (root may write anything).
TEST(SaveTarget, RefusesAWriteProtectedFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes write-protected files";
  ScratchDir dir;
  write_bytes(dir / "ckpt", "old");
  ASSERT_EQ(::chmod((dir / "ckpt").c_str(), 0444), 0);
  expect_mentions(error_of([&] { train::checked_save_target(dir / "ckpt"); }),
                  {"ckpt", "not writable"});
  EXPECT_EQ(read_bytes(dir / "ckpt"), "old");
}

// A file name as long as a file system allows (255 bytes) saves: the temporary file's name, the
// target's and a suffix, is cut to fit.
TEST(AtomicFile, AFileNameOfTheLongestLengthSaves) {
  ScratchDir dir;
  const std::string name(255, 'c');
  train::AtomicFile f(dir / name, "test");
  f.write("x", 1);
  f.commit();
  EXPECT_EQ(read_bytes(dir / name), "x");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{name}));
}
