// Whole runs of 16-bit storage to and from the compute type, for CPU kernels that work a row or
// a chunk at a time in f32 (Note [CPU dtypes]): widen a row into a buffer that stays in cache,
// compute, narrow the result into the 16-bit output. No tensor-sized f32 copy is ever made.
// For f32 and f64 storage, widen and narrow are plain copies, and RowReader skips even that.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/typed.h"

namespace frugal::kernels::cpu {

// dst[i] = float(src[i]) and dst[i] = round(src[i]) (round to nearest even, NaN kept a NaN),
// bit for bit what bf16_to_float / float_to_bf16 (and the f16 pair) give element by element:
// AVX2 (bf16, by shifting the bits) and F16C (f16) eight elements at a time, the scalar
// conversions of base/half.h for the tail. Inline, as kernels call them per row of a few
// dozen channels.
inline void widen(const bf16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(u));
  }
#endif
  for (; i < n; ++i) dst[i] = bf16_to_float(src[i].bits);
}

inline void narrow(const float* src, int64_t n, bf16_t* dst) {
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i half_ulp = _mm256_set1_epi32(0x7fff);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  for (; i + 8 <= n; i += 8) {
    __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    __m256i hi = _mm256_srli_epi32(u, 16);
    // round to nearest even: add 0x7fff plus the lowest kept bit, as float_to_bf16 does
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(half_ulp, _mm256_and_si256(hi, one))), 16);
    __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), is_nan);
    // 32 -> 16 bits: packus works within 128-bit lanes, so put the halves back in order
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
#endif
  for (; i < n; ++i) dst[i].bits = float_to_bf16(src[i]);
}

inline void widen(const f16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = f16_to_float(src[i].bits);
}

inline void narrow(const float* src, int64_t n, f16_t* dst) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i].bits = float_to_f16(src[i]);
}

template <typename T>
void widen(const T* src, int64_t n, T* dst) {
  std::copy(src, src + n, dst);
}
template <typename T>
void narrow(const T* src, int64_t n, T* dst) {
  std::copy(src, src + n, dst);
}

// True when S is stored in fewer bits than it is computed in (f16, bf16).
template <typename S>
inline constexpr bool is_narrow_v = !std::is_same_v<S, typename Num<S>::C>;

// One element in the compute type, for loops that convert as they go: written in plain shifts
// and selects so that the compiler vectorises the loops around them (bf16 widens with one shift,
// and narrows with round to nearest even, NaN kept a NaN, as float_to_bf16 does).
inline float widen1(bf16_t v) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(v.bits) << 16);
}
inline float widen1(float v) { return v; }
inline double widen1(double v) { return v; }
inline void narrow1(float v, bf16_t& out) {
  const uint32_t u = __builtin_bit_cast(uint32_t, v);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  out.bits = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
inline void narrow1(float v, float& out) { out = v; }
inline void narrow1(double v, double& out) { out = v; }

// Whether loops read and write S where it is stored, converting one element at a time (widen1,
// narrow1): f32, f64, and bf16, whose conversions are shifts that vectorise. f16's need F16C's
// instructions, which the compiler does not use for single elements: f16 rows are widened into a
// buffer and narrowed from one (widen, narrow above).
template <typename S>
inline constexpr bool converts_in_place_v = !std::is_same_v<S, f16_t>;

// Rows per block for kernels that walk [rows, c] tensors a block of rows at a time: about 8 KiB
// of f32 per block buffer, so a few of them stay in L1, and a per-block cost (a call, a loop
// tail) is paid once per many rows when c is a few dozen channels.
inline int64_t rows_per_block(int64_t c) {
  return std::max<int64_t>(1, 2048 / std::max<int64_t>(c, 1));
}

// Rows of `c` elements of S, up to `max_rows` consecutive rows at a time, as elements of type E:
// a pointer into the tensor itself when kInPlace, else into a per-reader buffer of the compute
// type that holds the widened rows. One reader per thread, and one per block that must be alive
// at the same time. The two kinds of caller are the aliases below.
template <typename S, bool kInPlace>
class BasicRowReader {
 public:
  using E = std::conditional_t<kInPlace, S, typename Num<S>::C>;
  explicit BasicRowReader(int64_t c, int64_t max_rows = 1) : c_(c) {
    if constexpr (!kInPlace) buf_.resize(static_cast<size_t>(c * max_rows));
  }
  // Rows r .. r + n - 1 (n <= max_rows), contiguous.
  const E* operator()(const S* base, int64_t r, int64_t n = 1) {
    if constexpr (kInPlace) {
      return base + r * c_;
    } else {
      widen(base + r * c_, n * c_, buf_.data());
      return buf_.data();
    }
  }

 private:
  int64_t c_;
  std::vector<E> buf_;
};

// The output side: row(r) gives where to write rows r .. r + n - 1 (n <= max_rows) as E,
// commit(r, n) stores them (narrowing the buffer when not kInPlace).
template <typename S, bool kInPlace>
class BasicRowWriter {
 public:
  using E = std::conditional_t<kInPlace, S, typename Num<S>::C>;
  BasicRowWriter(S* base, int64_t c, int64_t max_rows = 1) : base_(base), c_(c) {
    if constexpr (!kInPlace) buf_.resize(static_cast<size_t>(c * max_rows));
  }
  E* row(int64_t r) {
    if constexpr (kInPlace) {
      return base_ + r * c_;
    } else {
      return buf_.data();
    }
  }
  void commit(int64_t r, int64_t n = 1) {
    if constexpr (!kInPlace) narrow(buf_.data(), n * c_, base_ + r * c_);
  }

 private:
  S* base_;
  int64_t c_;
  std::vector<E> buf_;
};

// Rows seen as the compute type: the tensor itself when S is the compute type (f32, f64).
template <typename S>
using RowReader = BasicRowReader<S, !is_narrow_v<S>>;
template <typename S>
using RowWriter = BasicRowWriter<S, !is_narrow_v<S>>;

// Rows for loops that convert as they go, as RowElement<S> (the tensor itself where S converts
// in place, else a widened buffer). Loops read with widen1 and write with narrow1, so one body
// serves every dtype.
template <typename S>
using RowSource = BasicRowReader<S, converts_in_place_v<S>>;
// What such loops see of S: S itself, or the compute type for rows widened into a buffer.
template <typename S>
using RowElement = typename RowSource<S>::E;
template <typename S>
using RowSink = BasicRowWriter<S, converts_in_place_v<S>>;

}  // namespace frugal::kernels::cpu
