// Where a tensor lives: the host, a CUDA device, or meta (shapes and byte counts, no data).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace frugal {

enum class DeviceType : uint8_t { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  static Device meta() { return {DeviceType::meta, 0}; }

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool is_meta() const { return type == DeviceType::meta; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

// Parses "cpu", "cuda", "cuda:1", "meta"; throws frugal::Error naming the text otherwise.
Device parse_device(const std::string& s);

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace frugal
