// Saving a file so that no failure loses work: the target is checked before anything is written
// (and before a training run, with checked_save_target), the bytes go to a temporary file whose
// name no other writer shares, and only a complete, synced file is renamed onto the target.
//
//   train::AtomicFile f("ckpt.safetensors");  // checks the target, creates the temporary file
//   f.write(header.data(), header.size());     // ... as often as needed
//   f.commit();                                // fsync, rename onto the target, fsync the folder
//   // destroyed without commit() (an exception): the temporary file is removed, the target kept
//
// Note [Save targets]
// A save writes to the file a path names. A symbolic link is followed to the file it points to,
// so the link stays a link (a rename onto the link itself would replace it with a plain file).
// A directory, a device node, a FIFO or a socket is refused: renaming onto it would replace it
// (or, as root, /dev/null). The folder must exist and take a new file, which is probed by
// creating one, since permission bits do not say whether the file system is read-only.
// A write-protected file is refused, as opening it to write would be; a file that is replaced
// keeps its mode (and its group, where the user may set it), and a new one gets 0666 less the
// umask. The temporary file sits in the target's folder (a rename is atomic only within one file
// system) and is named "<target>.tmp.<pid>.<counter>.<random>", the target's file name cut to
// 192 bytes, so two processes, or two threads, saving to one path each write their own file and
// the last rename wins with a whole file; a temporary file left by a killed process is never
// reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace frugal::train {

// The file a save to `path` writes (the path itself, or the file a symbolic link points to), or
// a frugal::Error naming the path and what is wrong with it (Note [Save targets]).
std::string checked_save_target(const std::string& path);
// The same check as text for a command line: empty when `path` can be saved to (and *target is
// set), else what is wrong ("a directory; give a file name").
std::string save_target_problem(const std::string& path, std::string* target);

class AtomicFile {
 public:
  // `op` names the caller in messages ("save_safetensors").
  AtomicFile(const std::string& path, const std::string& op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends n bytes or throws naming the temporary file, the byte offset and errno's text.
  void write(const void* data, size_t n);
  // Syncs the bytes, renames the temporary file onto the target and syncs the folder.
  void commit();

  const std::string& target() const { return target_; }
  const std::string& temp_path() const { return temp_; }

 private:
  std::string op_, target_, temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Test hook (Note [Save targets]): fails this thread's AtomicFile operations as a full disk or a
// failing device would, with ENOSPC. `fail_at_call` counts write, fsync and rename calls from 0
// in the order they happen; `fail_at_byte` lets writes through up to that byte offset of the
// file and fails the write that would pass it. -1 disables either. Restores the previous setting
// when destroyed.
class ScopedWriteFault {
 public:
  ScopedWriteFault(int64_t fail_at_call, int64_t fail_at_byte);
  ~ScopedWriteFault();
  ScopedWriteFault(const ScopedWriteFault&) = delete;
  ScopedWriteFault& operator=(const ScopedWriteFault&) = delete;
  // Calls made while this fault was set (to know when a sweep has covered every call).
  int64_t calls() const;

 private:
  int64_t saved_call_, saved_byte_, saved_count_;
};

}  // namespace frugal::train
