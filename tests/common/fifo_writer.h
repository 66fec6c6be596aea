// A FIFO whose writer thread sends some bytes once a reader opens it: a reader that refuses FIFOs
// fails at once, and one that reads them (the bug) gets the bytes and returns, so that neither
// case of a test hangs.
#pragma once

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <thread>

namespace frugal::test {

class FifoWriter {
 public:
  FifoWriter(std::string path, std::string bytes) : path_(std::move(path)) {
    ::unlink(path_.c_str());
    if (::mkfifo(path_.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + path_ + " failed");
    writer_ = std::thread([this, bytes = std::move(bytes)] {
      // A write after the reader left raises SIGPIPE: blocked in this thread, write gets EPIPE.
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
      int fd = ::open(path_.c_str(), O_WRONLY);  // waits for a reader
      if (fd < 0) return;
      ssize_t ignored = ::write(fd, bytes.data(), bytes.size());
      (void)ignored;
      ::close(fd);
    });
  }
  // A reader of our own lets a writer still waiting in open() finish.
  ~FifoWriter() {
    int release = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK);
    writer_.join();
    if (release >= 0) ::close(release);
    ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::thread writer_;
};

}  // namespace frugal::test
