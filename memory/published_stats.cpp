// Publishing and reading per-process allocator statistics (Note [Published stats]).
#include "memory/published_stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "memory/allocator.h"

namespace frugal::memory {

namespace {

const char* dir_from_env() {
  const char* dir = std::getenv("FRUGAL_STATS_DIR");
  return dir != nullptr && dir[0] != '\0' ? dir : nullptr;
}

// The shared /tmp default must be ours: another user could have made it to read our files or
// plant others. A directory the user named is theirs to choose.
bool trusted(const std::string& dir, const struct stat& st) {
  return S_ISDIR(st.st_mode) &&
         (dir_from_env() != nullptr || dir != published_stats_dir() || st.st_uid == getuid());
}

// Makes `dir` (one level) unless it exists; false, errno set, when it is not a trusted directory.
bool ensure_dir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return false;
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return false;
  if (!trusted(dir, st)) {
    errno = EACCES;
    return false;
  }
  return true;
}

bool write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string program_name() {
#ifdef __GLIBC__
  std::string name = program_invocation_short_name;
#else
  std::string name = "?";
#endif
  std::replace(name.begin(), name.end(), '\n', '?');  // one line per key
  return name;
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

// The pid in a file name "<pid>.<suffix>"; 0 when the name is not of that form.
int64_t pid_of(const std::string& name, const std::string& suffix) {
  if (name.size() <= suffix.size() + 1 || !name.ends_with("." + suffix)) return 0;
  int64_t pid = 0;
  return parse_int(name.substr(0, name.size() - suffix.size() - 1), &pid) && pid > 0 ? pid : 0;
}

bool process_gone(int64_t pid) { return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

std::string published_stats_dir() {
  if (const char* dir = dir_from_env()) return dir;
  return "/tmp/frugal-" + std::to_string(getuid());
}

std::string format_published_stats(const PublishedStats& s) {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed << "pid=" << s.pid << "\nprogram=" << s.program << "\ndevice=" << s.device
     << "\nstep=" << s.step << "\ntime=" << s.time << "\nallocated=" << s.allocated
     << "\nallocated_peak=" << s.allocated_peak << "\nreserved=" << s.reserved
     << "\nreserved_peak=" << s.reserved_peak << "\n";
  return os.str();
}

std::optional<PublishedStats> parse_published_stats(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (const size_t eq = line.find('='); eq != std::string::npos) {
      kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  PublishedStats s;
  for (auto [key, field] : {std::pair{"pid", &s.pid},
                            {"step", &s.step},
                            {"allocated", &s.allocated},
                            {"allocated_peak", &s.allocated_peak},
                            {"reserved", &s.reserved},
                            {"reserved_peak", &s.reserved_peak}}) {
    auto it = kv.find(key);
    if (it == kv.end() || !parse_int(it->second, field)) return std::nullopt;
  }
  auto time = kv.find("time");
  if (time == kv.end() || time->second.empty()) return std::nullopt;
  char* end = nullptr;
  s.time = std::strtod(time->second.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  auto device = kv.find("device");
  if (device == kv.end() || device->second.empty() || s.pid <= 0) return std::nullopt;
  s.device = device->second;
  if (auto program = kv.find("program"); program != kv.end()) s.program = program->second;
  return s;
}

bool write_published_stats(const std::string& dir, const PublishedStats& s) {
  if (!ensure_dir(dir)) return false;
  const std::string tmp = dir + "/" + std::to_string(s.pid) + ".tmp";
  const std::string path = dir + "/" + std::to_string(s.pid) + ".stats";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool written = write_all(fd, format_published_stats(s));
  const bool closed = close(fd) == 0;
  if (!written || !closed || rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    unlink(tmp.c_str());
    errno = saved;
    return false;
  }
  return true;
}

void publish_stats(Device device, int64_t step, bool force) {
  static std::mutex mu;
  static bool published = false;
  static std::chrono::steady_clock::time_point last;
  static bool warned = false;
  std::lock_guard<std::mutex> lock(mu);
  const auto now = std::chrono::steady_clock::now();
  if (!force && published &&
      std::chrono::duration<double>(now - last).count() < kPublishIntervalSeconds) {
    return;
  }
  published = true;
  last = now;
  PublishedStats s;
  s.pid = getpid();
  s.program = program_name();
  s.device = device.str();
  s.step = step;
  s.time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  try {
    const MemoryStats m = allocator_for(device).stats();
    s.allocated = m.allocated_bytes.current;
    s.allocated_peak = m.allocated_bytes.peak;
    s.reserved = m.reserved_bytes.current;
    s.reserved_peak = m.reserved_bytes.peak;
  } catch (const std::exception& e) {  // a device without an allocator: nothing to publish
    if (!warned) std::fprintf(stderr, "frugal: not publishing memory stats: %s\n", e.what());
    warned = true;
    return;
  }
  const std::string dir = published_stats_dir();
  if (!write_published_stats(dir, s) && !warned) {
    std::fprintf(stderr, "frugal: cannot publish memory stats to %s: %s (warned once)\n",
                 dir.c_str(), std::strerror(errno));
    warned = true;
  }
}

namespace {

// Stats files are a few hundred bytes; a larger file under such a name is someone else's.
constexpr std::streamsize kLargestStatsFile = 1 << 16;

// The file's text, or nullopt when it is larger than any stats file (or unreadable).
std::optional<std::string> small_file_text(const std::string& path) {
  // A regular file only: opening a FIFO someone left under such a name would block for good.
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(static_cast<size_t>(kLargestStatsFile) + 1, '\0');
  in.read(text.data(), kLargestStatsFile + 1);
  if (in.gcount() > kLargestStatsFile) return std::nullopt;
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// Only what publish_stats wrote is read or removed: the directory may be shared
// (FRUGAL_STATS_DIR), and a file of another program's is not ours.
// A temporary file, which a writer may have left part-written: the start of `pid`'s stats.
bool begins_stats_of(const std::string& text, int64_t pid) {
  const std::string first = "pid=" + std::to_string(pid) + "\n";
  return text.size() < first.size() ? first.compare(0, text.size(), text) == 0
                                    : text.compare(0, first.size(), first) == 0;
}

// A stats file: `pid`'s stats, or nothing.
std::optional<PublishedStats> stats_of(const std::string& text, int64_t pid) {
  std::optional<PublishedStats> s = parse_published_stats(text);
  if (s && s->pid != pid) s.reset();
  return s;
}

}  // namespace

std::vector<PublishedStats> read_published_stats(const std::string& dir) {
  std::vector<PublishedStats> out;
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !trusted(dir, st)) return out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = dir + "/" + name;
    int64_t pid = pid_of(name, "stats");
    const bool temporary = pid == 0;
    if (temporary) pid = pid_of(name, "tmp");  // left by a writer that died mid-write
    if (pid == 0) continue;
    const std::optional<std::string> text = small_file_text(path);
    if (!text) continue;
    std::optional<PublishedStats> stats;  // parsed once: checked, then kept
    if (temporary ? !begins_stats_of(*text, pid) : !(stats = stats_of(*text, pid))) continue;
    if (process_gone(pid)) {
      unlink(path.c_str());
      continue;
    }
    if (stats) out.push_back(*stats);
  }
  closedir(d);
  std::sort(out.begin(), out.end(),
            [](const PublishedStats& a, const PublishedStats& b) { return a.pid < b.pid; });
  return out;
}

std::vector<PublishedStats> read_published_stats() {
  return read_published_stats(published_stats_dir());
}

}  // namespace frugal::memory
