// Paths checked before a command works (tools/options.h): each refusal a UsageError naming the
// command, the flag, the path and why.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tools/options.h"

using namespace frugal::tools;
namespace fs = std::filesystem;

namespace {

std::string problem_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

class PathChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("frugal_paths_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(at("file")) << "x";
    ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
    fs::create_symlink(at("loop2"), at("loop1"));
    fs::create_symlink(at("loop1"), at("loop2"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

}  // namespace

TEST_F(PathChecks, InputFilesMustBeReadableRegularFiles) {
  EXPECT_EQ(problem_of([&] { check_input_file("eval", "load", at("file")); }), "");
  for (const auto& [path, why] :
       std::vector<std::pair<std::string, std::string>>{{at(""), "directory"},
                                                        {at("fifo"), "not a regular file"},
                                                        {"/dev/zero", "not a regular file"},
                                                        {at("loop1"), "symbolic link"},
                                                        {at("missing"), "No such file"}}) {
    const std::string msg = problem_of([&] { check_input_file("eval", "load", path); });
    EXPECT_NE(msg.find("eval: --load '" + path + "' cannot be read"), std::string::npos) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
  }
}

TEST_F(PathChecks, OutputsMustBeWritableAndLeaveNothingBehind) {
  EXPECT_EQ(problem_of([&] { check_output_path("train", "memory-log", at("new.csv")); }), "");
  EXPECT_FALSE(fs::exists(at("new.csv")));  // the probe's empty file is removed again
  EXPECT_EQ(problem_of([&] { check_output_path("train", "memory-log", "/dev/null"); }), "");
  for (const std::string& path : {at(""), at("missing/x.csv"), at("file/x.csv"), at("fifo")}) {
    const std::string msg = problem_of([&] { check_output_path("train", "memory-log", path); });
    EXPECT_NE(msg.find("train: --memory-log '" + path + "' cannot be written"), std::string::npos)
        << msg;
  }
  // --save replaces its target, so a device node is refused there.
  EXPECT_NE(problem_of([&] { check_save_path("train", "save", "/dev/null"); }).find("device"),
            std::string::npos);
  EXPECT_EQ(problem_of([&] { check_save_path("train", "save", at("ckpt")); }), "");
}
