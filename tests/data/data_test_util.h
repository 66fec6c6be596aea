// Helpers for the data tests: a temporary folder, IDX byte builders and gzip via zlib.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace frugal::data::testing {

// A fresh folder under /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/frugal_data_test_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(uint8_t(v >> 24));
  b.push_back(uint8_t(v >> 16));
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}

inline std::vector<uint8_t> idx_images_bytes(uint32_t count, uint32_t rows, uint32_t cols,
                                             const std::vector<uint8_t>& pixels,
                                             uint32_t magic = 0x00000803) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

inline std::vector<uint8_t> idx_labels_bytes(uint32_t count, const std::vector<uint8_t>& labels,
                                             uint32_t magic = 0x00000801) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, count);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// One gzip member holding `raw`.
inline std::vector<uint8_t> gzip(const std::vector<uint8_t>& raw) {
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::vector<uint8_t> out(deflateBound(&zs, raw.size()) + 64);
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate failed");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

// Deterministic, never-constant bytes.
inline std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = uint8_t(s >> 24);
  }
  return v;
}

}  // namespace frugal::data::testing
