// What every fuzz target shares: the input written to a scratch file (the readers take paths, and
// the path is what their messages must name), and the rule that a rejection is a frugal::Error
// naming that file. Anything else (another exception, a message without the file) aborts, which
// libFuzzer reports as a crash.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"

namespace frugal::fuzz {

// A path of this process's own, on tmpfs when there is one.
inline std::string scratch_path(const std::string& name) {
  const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/frugal_fuzz_" + std::to_string(::getpid()) + "_" + name;
}

// The file each input is written to. Opened once and rewritten in place (pwrite, then ftruncate
// to the input's size): an fopen, fwrite and fclose per input were 5% of checkpoint_fuzz's time
// under ASan. The readers open the path themselves, so they see exactly the input's bytes.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name) : path_(scratch_path(name)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0) fail();
  }
  ~ScratchFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

  void write(const uint8_t* data, size_t size) {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail();
      done += static_cast<size_t>(n);
    }
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail();
  }

 private:
  [[noreturn]] void fail() const {
    std::perror(path_.c_str());
    std::abort();
  }

  std::string path_;
  int fd_ = -1;
};

// Runs load; a frugal::Error must name `path`. Returns whether load succeeded.
template <typename F>
bool loads_or_names(const std::string& path, F&& load) {
  try {
    load();
    return true;
  } catch (const Error& e) {
    if (std::string(e.what()).find(path) == std::string::npos) {
      std::fprintf(stderr, "unclear error (does not name %s): %s\n", path.c_str(), e.what());
      std::abort();
    }
    return false;
  }
}

}  // namespace frugal::fuzz
