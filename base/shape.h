// A tensor's dimensions, outermost first. Activations are NHWC (see DESIGN.md).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace frugal {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int64_t ndim() const { return static_cast<int64_t>(dims_.size()); }
  size_t size() const { return dims_.size(); }
  int64_t operator[](int64_t i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int64_t i) { return dims_[static_cast<size_t>(i)]; }
  // Dimension i counted from the end when negative, as in PyTorch; throws when out of range.
  int64_t dim(int64_t i) const;
  int64_t numel() const;
  // Some extent is 0: the shape holds no element, however large the others (numel() and
  // checked_nbytes look here before any product that could overflow).
  bool has_empty_extent() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t> strides() const;  // contiguous, row-major, in elements

  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  std::string str() const;  // "[2, 3, 4]"

 private:
  std::vector<int64_t> dims_;
};

// The broadcast of a and b (NumPy rules); throws naming op and both shapes when incompatible.
// An extent of 0 against 1 broadcasts to 0, as in NumPy and PyTorch.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Bytes of a tensor of `shape` with elements of `element_size` bytes; throws naming op and the
// shape when an extent is negative or the element count or byte count passes INT64_MAX (numel()
// would wrap, and an allocation of the wrapped size be read past its end).
size_t checked_nbytes(const Shape& shape, size_t element_size, const char* op);

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

}  // namespace frugal
