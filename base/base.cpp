// Parsing and printing for the base types.
#include <algorithm>
#include <cctype>
#include <charconv>

#include "base/device.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/shape.h"

namespace frugal {

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "float16" || s == "half" || s == "fp16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f64" || s == "float64" || s == "double") return DType::f64;
  FRUGAL_FAIL("unknown dtype '", s, "' (expected f32, f16, bf16 or f64)");
}

std::string Device::str() const {
  switch (type) {
    case DeviceType::cpu:
      return "cpu";
    case DeviceType::cuda:
      return "cuda:" + std::to_string(index);
    case DeviceType::meta:
      return "meta";
  }
  return "?";
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "meta") return Device::meta();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 &&
      std::all_of(s.begin() + 5, s.end(), [](char c) { return std::isdigit(c) != 0; })) {
    // from_chars, not stoi: an index past INT_MAX is this error, not std::out_of_range.
    int index = 0;
    auto [end, ec] = std::from_chars(s.data() + 5, s.data() + s.size(), index);
    FRUGAL_CHECK(ec == std::errc() && end == s.data() + s.size(), "device '", s,
                 "': the index is too large");
    return Device::cuda(index);
  }
  FRUGAL_FAIL("unknown device '", s, "' (expected cpu, cuda, cuda:N or meta)");
}

int64_t Shape::dim(int64_t i) const {
  int64_t n = ndim();
  int64_t j = i < 0 ? i + n : i;
  FRUGAL_CHECK(j >= 0 && j < n, "dimension ", i, " out of range for shape ", str());
  return j;
}

bool Shape::has_empty_extent() const {
  return std::find(dims_.begin(), dims_.end(), 0) != dims_.end();
}

int64_t Shape::numel() const {
  // An empty extent first: [2^62, 4, 0] is empty, and multiplying in order would overflow.
  if (has_empty_extent()) return 0;
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims_.size(), 1);
  for (int64_t i = ndim() - 2; i >= 0; --i) s[i] = s[i + 1] * dims_[i + 1];
  return s;
}

std::string Shape::str() const {
  std::string out = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[i]);
  }
  return out + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int64_t n = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.ndim() ? 1 : a[i - (n - a.ndim())];
    int64_t db = i < n - b.ndim() ? 1 : b[i - (n - b.ndim())];
    FRUGAL_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a.str(), " and ", b.str(),
                 " cannot be broadcast");
    out[static_cast<size_t>(i)] = da == 1 ? db : da;  // not max: 0 against 1 is 0
  }
  return Shape(std::move(out));
}

size_t checked_nbytes(const Shape& shape, size_t element_size, const char* op) {
  for (int64_t d : shape.dims()) FRUGAL_CHECK(d >= 0, op, ": negative extent in shape ", shape);
  // No bytes, however large the rest; numel() is not called before the overflow check below,
  // since the product could overflow there.
  if (shape.has_empty_extent()) return 0;
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape.dims()) overflow = overflow || __builtin_mul_overflow(n, d, &n);
  int64_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(n, static_cast<int64_t>(element_size), &bytes);
  FRUGAL_CHECK(!overflow, op, ": shape ", shape, " has more than 2^63 bytes");
  return static_cast<size_t>(bytes);
}

}  // namespace frugal
