// Streaming inflation with zlib (one z_stream reset per gzip member) or plain reads.
#include "data/maybe_gzip_reader.h"

#include <algorithm>

#include "base/error.h"

namespace frugal::data {
namespace {

// Compressed input is read and decompressed output produced in pieces of this size.
constexpr size_t kChunk = size_t{1} << 18;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

MaybeGzipReader::MaybeGzipReader(const std::string& path) : file_(path) {
  unsigned char magic[2] = {0, 0};
  if (file_.size() >= 2) file_.read_exact_at(0, magic, 2);
  gzipped_ = (magic[0] == 0x1f && magic[1] == 0x8b) || ends_with(path, ".gz");
}

MaybeGzipReader::~MaybeGzipReader() {
  if (zs_ready_) inflateEnd(&zs_);
}

uint64_t MaybeGzipReader::max_bytes() const {
  if (!gzipped_) return file_.size();
  return file_.size() > UINT64_MAX / kMaxDeflateRatio ? UINT64_MAX
                                                      : file_.size() * kMaxDeflateRatio;
}

bool MaybeGzipReader::fill_input() {
  // Keep what zlib has not consumed yet, then read after it.
  std::vector<uint8_t> rest(zs_.next_in, zs_.next_in + zs_.avail_in);
  // Sized by what is left of the file as it was opened (a file that grows since is not read on).
  const uint64_t left = file_size() - std::min(consumed_from_file_, file_size());
  in_.assign(rest.begin(), rest.end());
  in_.resize(rest.size() + static_cast<size_t>(std::min<uint64_t>(kChunk - rest.size(), left)));
  size_t got = file_.read(in_.data() + rest.size(), in_.size() - rest.size());
  in_.resize(rest.size() + got);
  consumed_from_file_ += got;
  zs_.next_in = in_.data();
  zs_.avail_in = static_cast<uInt>(in_.size());
  return got > 0;
}

// Inflates up to n bytes into dst; returns how many (0 only when the stream is done).
size_t MaybeGzipReader::inflate_some(uint8_t* dst, size_t n) {
  size_t produced = 0;
  while (produced < n && state_ != State::done) {
    if (state_ == State::between_members) {
      if (zs_.avail_in < 2) fill_input();
      if (zs_.avail_in == 0) {
        state_ = State::done;  // every member ended cleanly and nothing follows
        break;
      }
      const uint64_t at = compressed_offset();
      if (zs_.avail_in < 2 || zs_.next_in[0] != 0x1f || zs_.next_in[1] != 0x8b) {
        FRUGAL_FAIL(path(), ": ",
                    at == 0 ? "not a gzip stream" : "trailing garbage after gzip data",
                    " at compressed byte ", at, " of ", file_size());
      }
      int rc = zs_ready_ ? inflateReset(&zs_) : inflateInit2(&zs_, 15 + 16);
      if (rc != Z_OK) FRUGAL_FAIL(path(), ": zlib cannot start inflating (", zError(rc), ")");
      zs_ready_ = true;
      state_ = State::in_member;
    }
    if (zs_.avail_in == 0 && !fill_input()) {
      FRUGAL_FAIL(path(), ": corrupt gzip: unexpected end of compressed data at compressed byte ",
                  compressed_offset(), " of ", file_size(), " (zlib: ", zError(Z_BUF_ERROR), ")");
    }
    zs_.next_out = dst + produced;
    zs_.avail_out = static_cast<uInt>(std::min(n - produced, kChunk));
    const uInt room = zs_.avail_out;
    int rc = inflate(&zs_, Z_NO_FLUSH);
    produced += room - zs_.avail_out;
    if (rc == Z_STREAM_END) {
      state_ = State::between_members;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      FRUGAL_FAIL(path(), ": corrupt gzip at compressed byte ", compressed_offset(), " of ",
                  file_size(), " (zlib: ", zs_.msg != nullptr ? zs_.msg : zError(rc), ")");
    }
    // Z_BUF_ERROR: zlib needs more input; the next pass refills it or reports the early end.
  }
  return produced;
}

void MaybeGzipReader::read(uint64_t n, std::vector<uint8_t>& out) {
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, kChunk));
    const size_t old = out.size();
    out.resize(old + want);
    const size_t got =
        gzipped_ ? inflate_some(out.data() + old, want) : file_.read(out.data() + old, want);
    out.resize(old + got);
    if (got == 0) return;
    n -= got;
  }
}

bool MaybeGzipReader::at_end() {
  std::vector<uint8_t> probe;
  read(1, probe);
  return probe.empty();
}

}  // namespace frugal::data
