// IDX parsing. The file is read whole into memory (the largest Fashion-MNIST file is 47 MB, and a
// flat buffer keeps get() lock-free), but never more of it than its header declares.
#include "data/idx.h"

#include <new>

#include "base/error.h"
#include "data/maybe_gzip_reader.h"

namespace frugal::data {
namespace {

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

// 8 or 16 header bytes plus the product of the extents, or an error when it does not fit in
// 63 bits (a header-only file declaring 2^31 x 2^31 x 2^31 images must not wrap to a small size).
int64_t declared_size(const std::string& path, const std::vector<int64_t>& dims) {
  const int64_t header = 4 + 4 * static_cast<int64_t>(dims.size());
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : dims) overflow = overflow || __builtin_mul_overflow(n, d, &n);
  if (overflow || __builtin_add_overflow(n, header, &n)) {
    std::string extents;
    for (int64_t d : dims) extents += (extents.empty() ? "" : " x ") + std::to_string(d);
    FRUGAL_FAIL(path, ": the header's extents ", extents, " (bytes 4 to ", header,
                ") declare more bytes than any file can hold");
  }
  return n;
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

// The header (`ndims` extents after the magic) and then exactly the bytes it declares; reading
// stops there, so a gzip bomb or an endless file costs no more than a file of the declared size.
std::vector<uint8_t> read_declared(const std::string& path, uint32_t magic, int ndims,
                                   const char* what) {
  MaybeGzipReader in(path);
  std::vector<uint8_t> bytes;
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  in.read(header, bytes);
  const int64_t declared = declared_size(path, read_header(path, bytes, magic, ndims, what));
  // A shorter file is truncated whatever it holds: say so before allocating for it.
  if (static_cast<uint64_t>(declared) > in.max_bytes()) {
    if (!in.gzipped()) check_length(path, in.file_size(), declared);
    FRUGAL_FAIL(path, ": truncated: the header declares ", declared, " bytes but a gzip file of ",
                in.file_size(), " bytes inflates to at most ", in.max_bytes());
  }
  try {
    if (!in.gzipped()) bytes.reserve(static_cast<size_t>(declared));
    in.read(static_cast<uint64_t>(declared) - header, bytes);
  } catch (const std::bad_alloc&) {
    FRUGAL_FAIL(path, ": cannot allocate the ", declared, " bytes that the header declares");
  }
  check_length(path, bytes.size(), declared);
  if (!in.at_end()) {
    if (!in.gzipped()) check_length(path, in.file_size(), declared);
    FRUGAL_FAIL(path, ": trailing garbage: the inflated data runs on past byte ", declared,
                ", the end the header declares");
  }
  return bytes;
}

}  // namespace

IdxImages parse_idx_images(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::vector<int64_t> d = read_header(path, bytes, kIdxImagesMagic, 3, "images");
  if (d[1] == 0 || d[2] == 0) {
    // rows are the big-endian int32 at byte 8, columns at byte 12
    FRUGAL_FAIL(path, ": empty image size ", d[1], "x", d[2], " in the header at byte ",
                d[1] == 0 ? 8 : 12);
  }
  int64_t header = 16;
  check_length(path, bytes.size(), declared_size(path, d));
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
  check_length(path, bytes.size(), declared_size(path, d));
  IdxLabels out;
  out.path = path;
  out.count = d[0];
  out.labels.assign(bytes.begin() + header, bytes.end());
  return out;
}

IdxImages read_idx_images(const std::string& path) {
  return parse_idx_images(path, read_declared(path, kIdxImagesMagic, 3, "images"));
}

IdxLabels read_idx_labels(const std::string& path) {
  return parse_idx_labels(path, read_declared(path, kIdxLabelsMagic, 1, "labels"));
}

void check_same_count(const IdxImages& images, const IdxLabels& labels) {
  if (images.count != labels.count) {
    FRUGAL_FAIL(images.path, ": ", images.count, " images (count at byte 4) but ", labels.path,
                " has ", labels.count, " labels (count at byte 4)");
  }
}

}  // namespace frugal::data
