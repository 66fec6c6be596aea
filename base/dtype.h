// Element types. Floating types are what tensors compute in; i64 holds class labels and u8 holds
// dropout masks. f64 is CPU-only and exists for gradient checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace frugal {

enum class DType : uint8_t { f32, f16, bf16, f64, i64, u8 };
constexpr int kNumDTypes = 6;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f64:
      return "f64";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}

constexpr bool is_low_precision(DType t) { return t == DType::f16 || t == DType::bf16; }

// The type statistics, losses and optimizer state are kept in for tensors of type t:
// f64 stays f64 (gradient checks), everything else accumulates in f32.
constexpr DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// Result type of a mixed elementwise op ("promote" policy): the widest floating input (ops ask
// detail::result_dtype, which leaves a 0-d operand out when the other has dims).
constexpr DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  if (a == DType::f32 || b == DType::f32) return DType::f32;
  return DType::f32;  // f16 with bf16: neither holds the other, f32 holds both
}

// Parses "f32", "float32", "f16", "half", "float16", "bf16", "bfloat16", "f64"; throws otherwise.
DType parse_dtype(const std::string& s);

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace frugal
