// IDX parsing and gzip inflation (the only zlib user of frugal). The file is inflated whole into
// memory: the largest Fashion-MNIST file is 47 MB, and a flat buffer keeps get() lock-free.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "base/error.h"

namespace frugal::data {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_gzip_member(const std::vector<uint8_t>& raw, size_t at) {
  return at + 2 <= raw.size() && raw[at] == 0x1f && raw[at + 1] == 0x8b;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) FRUGAL_FAIL(path, ": cannot open for reading");
  std::vector<uint8_t> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) FRUGAL_FAIL(path, ": read error");
  return raw;
}

// Inflates every gzip member of raw, one after the other, into out.
std::vector<uint8_t> inflate_gzip(const std::string& path, const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> out;
  // The last member's trailer holds its inflated size mod 2^32: a good first guess, capped by
  // deflate's best ratio (1032:1) and 1 GiB so that a corrupt trailer cannot reserve more.
  if (raw.size() >= 18) {
    size_t n = raw.size();
    size_t isize = uint32_t(raw[n - 4]) | uint32_t(raw[n - 3]) << 8 | uint32_t(raw[n - 2]) << 16 |
                   uint32_t(raw[n - 1]) << 24;
    out.reserve(std::min({isize, n * 1032, size_t{1} << 30}));
  }
  std::vector<uint8_t> chunk(size_t{1} << 18);
  size_t at = 0;  // start of the current member in raw
  while (at < raw.size()) {
    if (!is_gzip_member(raw, at)) {
      FRUGAL_FAIL(path, ": ", at == 0 ? "not a gzip stream" : "trailing garbage after gzip data",
                  " at compressed byte ", at, " of ", raw.size());
    }
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) FRUGAL_FAIL(path, ": zlib inflateInit2 failed");
    zs.next_in = const_cast<Bytef*>(raw.data() + at);
    zs.avail_in = static_cast<uInt>(raw.size() - at);  // files beyond 4 GB are not IDX files
    int rc = Z_OK;
    while (rc == Z_OK) {
      zs.next_out = chunk.data();
      zs.avail_out = static_cast<uInt>(chunk.size());
      rc = inflate(&zs, Z_NO_FLUSH);
      out.insert(out.end(), chunk.data(), chunk.data() + (chunk.size() - zs.avail_out));
    }
    size_t consumed = raw.size() - at - zs.avail_in;
    std::string msg = zs.msg != nullptr ? zs.msg : "";
    inflateEnd(&zs);
    if (rc != Z_STREAM_END) {
      // With a whole chunk of room for output, Z_BUF_ERROR means the input ended early.
      if (rc == Z_BUF_ERROR) {
        FRUGAL_FAIL(path, ": corrupt gzip: unexpected end of compressed data at compressed byte ",
                    at + consumed, " of ", raw.size(), " (zlib: ", zError(Z_BUF_ERROR), ")");
      }
      FRUGAL_FAIL(path, ": corrupt gzip at compressed byte ", at + consumed, " of ", raw.size(),
                  " (zlib: ", msg.empty() ? zError(rc) : msg.c_str(), ")");
    }
    at += consumed;
  }
  return out;
}

uint32_t read_be32(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 |
         uint32_t(b[at + 3]);
}

// Checks the magic at byte 0 and reads `ndims` big-endian extents after it.
std::vector<int64_t> read_header(const std::string& path, const std::vector<uint8_t>& bytes,
                                 uint32_t magic, int ndims, const char* what) {
  size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() < 4) {
    FRUGAL_FAIL(path, ": truncated at byte ", bytes.size(), " of ", header,
                "-byte IDX header expected");
  }
  uint32_t got = read_be32(bytes, 0);
  if (got != magic) {
    FRUGAL_FAIL(path, ": bad magic number 0x", std::hex, got, " at byte 0, expected 0x", magic,
                std::dec, " (IDX ", what, ")");
  }
  if (bytes.size() < header) {
    FRUGAL_FAIL(path, ": truncated at byte ", bytes.size(), " of ", header,
                "-byte IDX header expected");
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < ndims; ++d) {
    uint32_t v = read_be32(bytes, 4 + 4 * static_cast<size_t>(d));
    // Extents above 2^31 are not sane IDX files and would overflow the size checks below.
    if (v > 0x7fffffffu) {
      FRUGAL_FAIL(path, ": dimension ", d, " = ", v, " at byte ", 4 + 4 * d, " is not plausible");
    }
    dims.push_back(static_cast<int64_t>(v));
  }
  return dims;
}

void check_length(const std::string& path, size_t have, int64_t expected) {
  if (static_cast<int64_t>(have) < expected) {
    FRUGAL_FAIL(path, ": truncated at byte ", have, " of ", expected, " expected");
  }
  if (static_cast<int64_t>(have) > expected) {
    FRUGAL_FAIL(path, ": trailing garbage: ", static_cast<int64_t>(have) - expected,
                " extra bytes from byte ", expected, " (file has ", have, ")");
  }
}

}  // namespace

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  std::vector<uint8_t> raw = read_file(path);
  if (is_gzip_member(raw, 0) || ends_with(path, ".gz")) return inflate_gzip(path, raw);
  return raw;
}

IdxImages parse_idx_images(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::vector<int64_t> d = read_header(path, bytes, kIdxImagesMagic, 3, "images");
  if (d[1] == 0 || d[2] == 0) {
    FRUGAL_FAIL(path, ": empty image size ", d[1], "x", d[2], " in the header at byte 8");
  }
  int64_t header = 16;
  check_length(path, bytes.size(), header + d[0] * d[1] * d[2]);
  IdxImages out;
  out.path = path;
  out.count = d[0];
  out.rows = d[1];
  out.cols = d[2];
  out.pixels.assign(bytes.begin() + header, bytes.end());
  return out;
}

IdxLabels parse_idx_labels(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::vector<int64_t> d = read_header(path, bytes, kIdxLabelsMagic, 1, "labels");
  int64_t header = 8;
  check_length(path, bytes.size(), header + d[0]);
  IdxLabels out;
  out.path = path;
  out.count = d[0];
  out.labels.assign(bytes.begin() + header, bytes.end());
  return out;
}

IdxImages read_idx_images(const std::string& path) {
  return parse_idx_images(path, read_maybe_gzip(path));
}

IdxLabels read_idx_labels(const std::string& path) {
  return parse_idx_labels(path, read_maybe_gzip(path));
}

void check_same_count(const IdxImages& images, const IdxLabels& labels) {
  if (images.count != labels.count) {
    FRUGAL_FAIL(images.path, ": ", images.count, " images (count at byte 4) but ", labels.path,
                " has ", labels.count, " labels (count at byte 4)");
  }
}

}  // namespace frugal::data
