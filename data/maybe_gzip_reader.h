// The bytes of a file, inflated when it is gzip'd, read on demand: a reader asks for the size its
// header declares and no more, so a gzip bomb or an endless file cannot fill memory.
//
//   data::MaybeGzipReader in(path);            // regular files only (base/input_file.h)
//   std::vector<uint8_t> bytes;
//   in.read(16, bytes);                         // the header, or fewer bytes when the data ends
//   in.read(declared - 16, bytes);
//   bool clean = in.at_end();      // nothing follows (for gzip: the stream checks out)
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/input_file.h"

namespace frugal::data {

// Deflate's best compression ratio: no gzip member inflates to more than this times its size.
constexpr uint64_t kMaxDeflateRatio = 1032;

class MaybeGzipReader {
 public:
  // gzip'd when the file starts with 1f 8b or its name ends in .gz. Concatenated members are
  // joined; a corrupt stream throws with zlib's message and the compressed byte offset, as does
  // anything after the last member that is not another member.
  explicit MaybeGzipReader(const std::string& path);
  ~MaybeGzipReader();
  MaybeGzipReader(const MaybeGzipReader&) = delete;
  MaybeGzipReader& operator=(const MaybeGzipReader&) = delete;

  const std::string& path() const { return file_.path(); }
  bool gzipped() const { return gzipped_; }
  uint64_t file_size() const { return file_.size(); }
  // The most bytes the file can yield: its size, or kMaxDeflateRatio times it when gzip'd.
  uint64_t max_bytes() const;

  // Appends up to n more bytes to out, growing it only as bytes arrive; fewer than n only when
  // the data ends.
  void read(uint64_t n, std::vector<uint8_t>& out);
  // True when no byte follows what was read; for gzip this inflates the rest of the stream, so
  // its CRC and any further members are checked.
  bool at_end();

 private:
  enum class State { between_members, in_member, done };
  bool fill_input();  // refills in_ when zlib consumed it; false at the end of the file
  uint64_t compressed_offset() const { return consumed_from_file_ - zs_.avail_in; }
  size_t inflate_some(uint8_t* dst, size_t n);

  InputFile file_;
  bool gzipped_ = false;
  State state_ = State::between_members;
  z_stream zs_{};
  bool zs_ready_ = false;
  std::vector<uint8_t> in_;          // compressed input, refilled as zlib consumes it
  uint64_t consumed_from_file_ = 0;  // bytes of the file read into in_ so far
};

}  // namespace frugal::data
