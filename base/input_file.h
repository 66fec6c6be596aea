// A file opened for reading that is known to be a regular file. Directories, FIFOs, sockets and
// device nodes are refused up front with an error naming the path, so that a reader neither
// hangs on a FIFO nor reads /dev/zero forever, and its size is known before the first read.
//
//   InputFile f(path, "load_safetensors");     // throws frugal::Error unless a regular file
//   std::vector<char> head(8);
//   f.read_exact_at(0, head.data(), head.size());   // throws naming the offset when short
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace frugal {

class InputFile {
 public:
  // `who` prefixes every message ("load_safetensors: '<path>': ..."); empty gives "<path>: ...".
  InputFile(const std::string& path, const std::string& who = "");
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // in bytes, when it was opened

  // Reads up to n bytes at the current position; returns how many (0 at the end of the file).
  size_t read(void* dst, size_t n);
  // Reads exactly n bytes at `offset`; throws naming the offset when the file ends first (it
  // shrank after being opened) or the read fails.
  void read_exact_at(uint64_t offset, void* dst, size_t n);

  // "<who>: '<path>'" or "<path>", the start of every message about this file.
  std::string where() const;

 private:
  std::string path_, who_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace frugal
