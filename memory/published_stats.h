// Each frugal process may publish its allocator statistics for other processes to read, so that
// `frugal smi` shows what nvidia-smi cannot: allocated and reserved bytes and their peaks.
//
// Note [Published stats]
// One small file per process, <dir>/<pid>.stats, where <dir> is $FRUGAL_STATS_DIR or else
// /tmp/frugal-<uid> (made 0700, and refused when another user owns it). The text is one key=value
// per line (pid, program, device, step, time, allocated, allocated_peak, reserved, reserved_peak);
// readers ignore keys they do not know. A writer writes <pid>.tmp and renames it over the old
// file, so a reader sees the previous statistics or the new ones, never half of either. Nobody
// deletes their own file on exit (a crash could not anyway): readers remove the files of
// processes that no longer exist (kill(pid, 0) fails with ESRCH).
//
//   memory::publish_stats(device, step);        // at every step end: writes at most every 0.5 s
//   memory::publish_stats(device, step, true);  // now (the last step, a phase change)
//   for (const memory::PublishedStats& s : memory::read_published_stats()) ...
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/device.h"

namespace frugal::memory {

constexpr double kPublishIntervalSeconds = 0.5;

struct PublishedStats {
  int64_t pid = 0;
  std::string program;
  std::string device;  // Device::str(): "cuda:0", "cpu"
  int64_t step = 0;
  double time = 0;  // when written, seconds since the Unix epoch
  int64_t allocated = 0;
  int64_t allocated_peak = 0;
  int64_t reserved = 0;
  int64_t reserved_peak = 0;
};

// $FRUGAL_STATS_DIR, or /tmp/frugal-<uid>.
std::string published_stats_dir();

// Writes this process's statistics of `device` at `step`, unless the last write was less than
// kPublishIntervalSeconds ago and `force` is false. Never throws: a monitor must not stop
// training, so a failure to write is one warning on stderr, once per process.
void publish_stats(Device device, int64_t step, bool force = false);

// Every live process's statistics from published_stats_dir() (or `dir`), by pid; files of dead
// processes are removed, files that do not parse are skipped.
std::vector<PublishedStats> read_published_stats();
std::vector<PublishedStats> read_published_stats(const std::string& dir);

// The pieces above, for tests: the file's text and back (nullopt when a field is missing or
// malformed), and the atomic write into `dir` (made when missing; false, errno set, on failure).
std::string format_published_stats(const PublishedStats& s);
std::optional<PublishedStats> parse_published_stats(const std::string& text);
bool write_published_stats(const std::string& dir, const PublishedStats& s);

}  // namespace frugal::memory
