// Helpers for the file tests: scratch paths, hand-made safetensors bytes, and bitwise snapshots
// of tensors (to prove a failed load changed nothing).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "common/error_of.h"  // test::error_of, for the file tests too
#include "core/tensor.h"

namespace frugal::test {

// A fresh folder under the temp directory, unique per test and process, removed with everything
// in it.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("frugal_dir_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  // Entries of the folder (temporary files a save must not leave behind).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      out.push_back(e.path().filename());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

// A fresh path under the temp directory, unique per test and process; removed with its ".tmp".
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::temp_directory_path() /
             ("frugal_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + tag +
              "_" + std::to_string(::getpid()) + ".safetensors"))
                .string();
    std::filesystem::remove(path_);
  }
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    std::filesystem::remove(path_ + ".tmp", ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file as the reference writes it: length, JSON padded with spaces to 8 bytes, data.
inline std::string safetensors_bytes(std::string json, const std::string& data) {
  json.append((8 - json.size() % 8) % 8, ' ');
  return u64_le(json.size()) + json + data;
}

// Little-endian bytes of a list of floats (the test machines are little-endian, as is the format).
inline std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Host copy of a tensor's bytes.
inline std::string tensor_bytes(const Tensor& t) {
  Tensor h = t.detach().to(Device::cpu());
  return std::string(static_cast<const char*>(h.data_ptr()), h.nbytes());
}

// Every named tensor's shape, dtype and bytes, for bit-for-bit comparisons.
template <typename Named>
std::vector<std::string> snapshot(const Named& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) {
    out.push_back(name + " " + t.shape().str() + " " + dtype_name(t.dtype()) + " " +
                  tensor_bytes(t));
  }
  return out;
}

// Expects every part to appear in msg.
inline void expect_mentions(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

}  // namespace frugal::test
