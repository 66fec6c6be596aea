// Opening with O_NONBLOCK makes open() itself return at once on a FIFO with no writer; fstat on
// the opened descriptor then decides, so nothing can swap the file between the check and the read.
#include "base/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace frugal {
namespace {

// What a non-regular file is, for the message.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of an unknown kind";
}

}  // namespace

InputFile::InputFile(const std::string& path, const std::string& who) : path_(path), who_(who) {
  do {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) FRUGAL_FAIL(where(), ": cannot open for reading: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    FRUGAL_FAIL(where(), ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    FRUGAL_FAIL(where(), " is ", kind_of(st.st_mode), ", not a regular file");
  }
  // Regular files ignore O_NONBLOCK; clearing it keeps read() plain blocking I/O all the same.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::where() const { return who_.empty() ? path_ : who_ + ": '" + path_ + "'"; }

size_t InputFile::read(void* dst, size_t n) {
  for (;;) {
    ssize_t got = ::read(fd_, dst, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) FRUGAL_FAIL(where(), ": read error: ", std::strerror(errno));
  }
}

void InputFile::read_exact_at(uint64_t offset, void* dst, size_t n) {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      FRUGAL_FAIL(where(), ": read error at byte offset ", offset + done, ": ",
                  std::strerror(errno));
    }
    if (got == 0) {
      FRUGAL_FAIL(where(), ": the file ends at byte offset ", offset + done, ", ", n - done,
                  " bytes short of what was to be read (did it shrink while being read?)");
    }
    done += static_cast<size_t>(got);
  }
}

}  // namespace frugal
