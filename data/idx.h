// IDX files (the MNIST / Fashion-MNIST format), gzip'd or raw, read whole into memory with zlib,
// but never more than the header declares. Every rejection throws frugal::Error naming the file
// and the byte offset where it went wrong; only regular files are read (not FIFOs or /dev/zero).
//
//   data::IdxImages x = data::read_idx_images(dir + "/train-images-idx3-ubyte.gz");
//   data::IdxLabels y = data::read_idx_labels(dir + "/train-labels-idx1-ubyte.gz");
//   data::check_same_count(x, y);   // x.count == y.count, else an error naming both files
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frugal::data {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // u8, 3 dimensions [count, rows, cols]
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // u8, 1 dimension [count]

struct IdxImages {
  std::string path;
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;  // [count, rows, cols]
};

struct IdxLabels {
  std::string path;
  int64_t count = 0;
  std::vector<uint8_t> labels;  // [count]
};

// Parse already-read IDX bytes; `path` only names the file in errors.
IdxImages parse_idx_images(const std::string& path, const std::vector<uint8_t>& bytes);
IdxLabels parse_idx_labels(const std::string& path, const std::vector<uint8_t>& bytes);

// gzip'd when the file starts with 1f 8b or its name ends in .gz (data/maybe_gzip_reader.h).
IdxImages read_idx_images(const std::string& path);
IdxLabels read_idx_labels(const std::string& path);

// Throws naming both files when the counts differ.
void check_same_count(const IdxImages& images, const IdxLabels& labels);

}  // namespace frugal::data
