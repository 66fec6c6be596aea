// widen / narrow for 16-bit storage: AVX2 (bf16, by shifting the bits) and F16C (f16) eight
// elements at a time, the scalar conversions of base/half.h for the tail.
#include "kernels/cpu/widen.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace frugal::kernels::cpu {

void widen(const bf16_t* src, int64_t n, float* dst) {
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

void narrow(const float* src, int64_t n, bf16_t* dst) {
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

void widen(const f16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = f16_to_float(src[i].bits);
}

void narrow(const float* src, int64_t n, f16_t* dst) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i].bits = float_to_f16(src[i]);
}

}  // namespace frugal::kernels::cpu
