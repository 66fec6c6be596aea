// Paths checked before a command does its work (tools/options.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tools/options.h"
#include "train/atomic_file.h"

namespace frugal::tools {

void check_save_path(const std::string& command, const std::string& flag, const std::string& path) {
  std::string target;
  const std::string problem = train::save_target_problem(path, &target);
  if (!problem.empty()) {
    throw UsageError(command + ": --" + flag + " '" + path + "' cannot be written: " + problem);
  }
}

void check_output_path(const std::string& command, const std::string& flag,
                       const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existed = fs::exists(fs::symlink_status(path, ec));
  std::string problem;
  if (path.empty()) {
    problem = "the path is empty";
  } else if (fs::is_directory(fs::status(path, ec))) {
    problem = "it is a directory; give a file name";
  } else {
    // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of blocking here.
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
      problem = std::strerror(errno);
    } else {
      ::close(fd);
      if (!existed) ::unlink(path.c_str());  // leave no empty file behind a later failure
    }
  }
  if (!problem.empty()) {
    throw UsageError(command + ": --" + flag + " '" + path + "' cannot be written: " + problem);
  }
}

void check_input_file(const std::string& command, const std::string& flag,
                      const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // follows links; a loop is an error here
  std::string problem;
  if (ec) {
    problem = ec.message();
  } else if (fs::is_directory(st)) {
    problem = "it is a directory, not a file";
  } else if (!fs::is_regular_file(st)) {
    problem = "it is not a regular file (a device, FIFO or socket)";
  } else if (::access(path.c_str(), R_OK) != 0) {
    problem = std::strerror(errno);
  }
  if (!problem.empty()) {
    throw UsageError(command + ": --" + flag + " '" + path + "' cannot be read: " + problem);
  }
}

}  // namespace frugal::tools
