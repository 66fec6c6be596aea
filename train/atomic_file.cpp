// Checked save targets and all-or-nothing file writes (Note [Save targets]).
#include "train/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/error.h"

namespace frugal::train {
namespace {

namespace fs = std::filesystem;

// ScopedWriteFault's setting, per thread so a test's fault never reaches another thread's save.
thread_local int64_t t_fail_at_call = -1;
thread_local int64_t t_fail_at_byte = -1;
thread_local int64_t t_calls = 0;

// True when the hook fails this call (errno is then ENOSPC).
bool injected_failure() {
  const bool fail = t_fail_at_call >= 0 && t_calls == t_fail_at_call;
  ++t_calls;
  if (fail) errno = ENOSPC;
  return fail;
}

// A name in the target's folder that no other process or thread of this host picks. The
// target's file name is cut to kTempStemBytes so that a name of up to 255 bytes, which the
// target may have, stays one with the suffix.
constexpr size_t kTempStemBytes = 192;
std::string temp_name_for(const std::string& target) {
  static std::atomic<uint64_t> counter{0};
  static const uint32_t token = std::random_device{}();
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%llu.%08x", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)), token);
  const size_t slash = target.find_last_of('/');
  const size_t name_at = slash == std::string::npos ? 0 : slash + 1;
  return target.substr(0, name_at + std::min(target.size() - name_at, kTempStemBytes)) + suffix;
}

// Creates a fresh temporary file for target (O_EXCL: an existing one, say left by a killed
// process, is skipped, never reused); returns its descriptor and sets *temp, or -1 with errno.
int create_temp(const std::string& target, std::string* temp) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    *temp = temp_name_for(target);
    // 0666 less the umask, as any new file; an existing target's mode replaces it (AtomicFile).
    const int fd = ::open(temp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

}  // namespace

std::string save_target_problem(const std::string& path, std::string* target_out) {
  if (path.empty()) return "the path is empty";
  std::error_code ec;
  fs::path target = path;
  const fs::file_status link = fs::symlink_status(target, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return ec.message();
  if (fs::is_symlink(link)) {
    fs::path resolved = fs::canonical(target, ec);  // fails on a dangling link or a loop
    if (ec) return "a symbolic link that leads to no file (" + ec.message() + ")";
    target = resolved;
  }
  const fs::file_status st = fs::status(target, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return ec.message();
  if (fs::is_directory(st)) return "a directory; give a file name";
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    return "not a regular file (a device, FIFO or socket), which a save would replace";
  }
  // A write-protected file is kept from being overwritten, as opening it to write would be.
  if (fs::exists(st) && ::access(target.c_str(), W_OK) != 0) {
    return std::string("the file is not writable (") + std::strerror(errno) +
           "), which a save would replace";
  }
  const fs::path folder = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const fs::file_status fst = fs::status(folder, ec);
  if (!fs::is_directory(fst)) {
    return "its folder '" + folder.string() + "' " +
           (fs::exists(fst) ? "is not a folder" : "does not exist");
  }
  // Permission bits do not tell a read-only file system (or root's view of one): create a file.
  std::string probe;
  const int fd = create_temp(target.string(), &probe);
  if (fd < 0) return "no file can be created in '" + folder.string() + "': " + std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  *target_out = target.string();
  return "";
}

std::string checked_save_target(const std::string& path) {
  std::string target;
  const std::string problem = save_target_problem(path, &target);
  FRUGAL_CHECK(problem.empty(), "save: cannot write '", path, "': ", problem);
  return target;
}

AtomicFile::AtomicFile(const std::string& path, const std::string& op) : op_(op) {
  try {
    target_ = checked_save_target(path);
  } catch (const Error& e) {
    FRUGAL_FAIL(op, ": ", e.what());
  }
  fd_ = create_temp(target_, &temp_);
  FRUGAL_CHECK(fd_ >= 0, op, ": cannot create '", temp_, "': ", std::strerror(errno));
  // The renamed file takes the place of the target: it keeps the target's permissions and, where
  // this user may set it, its group (a private 0600 checkpoint stays private).
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) {
    if (::fchmod(fd_, st.st_mode & 07777) != 0) {
      const int err = errno;
      ::close(fd_);  // a constructor that throws runs no destructor
      ::unlink(temp_.c_str());
      FRUGAL_FAIL(op, ": cannot give '", temp_, "' the mode of '", target_,
                  "': ", std::strerror(err));
    }
    (void)::fchown(fd_, static_cast<uid_t>(-1), st.st_gid);  // refused unless a member: kept
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = n;
    bool short_by_fault = false;
    if (t_fail_at_byte >= 0 && written_ + chunk > static_cast<uint64_t>(t_fail_at_byte)) {
      chunk = static_cast<size_t>(static_cast<uint64_t>(t_fail_at_byte) - written_);
      short_by_fault = true;  // the disk fills after `chunk` more bytes
    }
    ssize_t w = -1;
    if (injected_failure()) {
      w = -1;
    } else if (chunk == 0 && short_by_fault) {
      errno = ENOSPC;
    } else {
      w = ::write(fd_, p, chunk);
    }
    if (w < 0 && errno == EINTR) continue;
    FRUGAL_CHECK(w > 0, op_, ": writing '", temp_, "' failed at byte offset ", written_, ": ",
                 std::strerror(errno == 0 ? EIO : errno), " ('", target_, "' is unchanged)");
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void AtomicFile::commit() {
  FRUGAL_CHECK(fd_ >= 0 && !committed_, op_, ": '", temp_, "' is already committed");
  // The bytes must be on disk before the rename makes them the file's only version.
  FRUGAL_CHECK(!injected_failure() && ::fsync(fd_) == 0, op_, ": fsync of '", temp_,
               "' failed: ", std::strerror(errno), " ('", target_, "' is unchanged)");
  const int fd = fd_;
  fd_ = -1;
  FRUGAL_CHECK(::close(fd) == 0, op_, ": closing '", temp_, "' failed: ", std::strerror(errno),
               " ('", target_, "' is unchanged)");
  FRUGAL_CHECK(!injected_failure() && ::rename(temp_.c_str(), target_.c_str()) == 0, op_,
               ": renaming '", temp_, "' to '", target_, "' failed: ", std::strerror(errno), " ('",
               target_, "' is unchanged)");
  committed_ = true;
  // Make the rename itself durable; the file is complete either way, so a failure here is moot.
  const fs::path folder = fs::path(target_).parent_path();
  const int dir = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

ScopedWriteFault::ScopedWriteFault(int64_t fail_at_call, int64_t fail_at_byte)
    : saved_call_(t_fail_at_call), saved_byte_(t_fail_at_byte), saved_count_(t_calls) {
  t_fail_at_call = fail_at_call;
  t_fail_at_byte = fail_at_byte;
  t_calls = 0;
}

ScopedWriteFault::~ScopedWriteFault() {
  t_fail_at_call = saved_call_;
  t_fail_at_byte = saved_byte_;
  t_calls = saved_count_;
}

int64_t ScopedWriteFault::calls() const { return t_calls; }

}  // namespace frugal::train
