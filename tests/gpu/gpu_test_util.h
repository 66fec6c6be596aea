// Shared pieces of the CUDA parity tests: device buffers filled from host floats rounded to a
// dtype, output poisoning (NaN bytes), and the relative error ||out - ref|| / ||ref|| with
// per-dtype bounds. Every test first skips when no CUDA device is visible.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "kernels/context.h"
#include "kernels/conv.h"
#include "kernels/cuda/runtime.h"
#include "kernels/elementwise.h"

namespace frugal::gputest {

// FRUGAL_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it) makes a missing device a failure: a run
// meant to test the GPU must not pass by skipping every test.
inline bool gpu_required() {
  const char* v = std::getenv("FRUGAL_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

#define SKIP_WITHOUT_GPU()                                       \
  if (::frugal::kernels::cuda_device_count() == 0) {             \
    if (::frugal::gputest::gpu_required())                       \
      FAIL() << "no CUDA device, and FRUGAL_REQUIRE_GPU is set"; \
    GTEST_SKIP() << "no CUDA device";                            \
  }

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

// f32 holds 1e-5 because TF32 is off for f32 in cuBLAS and cuDNN.
inline double tolerance(DType t) {
  switch (t) {
    case DType::f16:
      return 5e-3;
    case DType::bf16:
      return 2e-2;
    default:
      return 1e-5;
  }
}

inline float round_to(DType t, float v) {
  switch (t) {
    case DType::f16:
      return f16_to_float(float_to_f16(v));
    case DType::bf16:
      return bf16_to_float(float_to_bf16(v));
    default:
      return v;
  }
}

// n uniform values in [lo, hi), already representable in dtype t.
inline std::vector<float> random_values(size_t n, uint32_t seed, DType t, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(t, dist(gen));
  return v;
}

inline kernels::Context gpu() { return kernels::Context::of(Device::cuda(0)); }
inline kernels::Context cpu() { return kernels::Context::of(Device::cpu()); }

// A device array of n elements of dtype.
class DeviceBuffer {
 public:
  DeviceBuffer(DType dtype, int64_t n) : dtype_(dtype), n_(n) {
    data_ = memory::allocator_for(Device::cuda(0)).allocate(bytes() + 16);
  }
  void* get() const { return data_.get(); }
  template <typename U>
  U* as() const {
    return static_cast<U*>(data_.get());
  }
  size_t bytes() const { return static_cast<size_t>(n_) * dtype_size(dtype_); }

  void upload_raw(const void* src) {
    kernels::copy_bytes(gpu(), Device::cuda(0), get(), Device::cpu(), src, bytes());
  }
  void download_raw(void* dst) const {
    kernels::copy_bytes(gpu(), Device::cpu(), dst, Device::cuda(0), get(), bytes());
  }
  // Floats converted to the buffer's dtype (f32, f16, bf16).
  void upload(const std::vector<float>& v) {
    EXPECT_EQ(static_cast<int64_t>(v.size()), n_);
    std::vector<uint8_t> raw(bytes());
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype_ == DType::f32) {
        std::memcpy(&raw[i * 4], &v[i], 4);
      } else {
        uint16_t h = dtype_ == DType::f16 ? float_to_f16(v[i]) : float_to_bf16(v[i]);
        std::memcpy(&raw[i * 2], &h, 2);
      }
    }
    upload_raw(raw.data());
  }
  std::vector<float> download() const {
    std::vector<uint8_t> raw(bytes());
    download_raw(raw.data());
    std::vector<float> v(static_cast<size_t>(n_));
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype_ == DType::f32) {
        std::memcpy(&v[i], &raw[i * 4], 4);
      } else {
        uint16_t h;
        std::memcpy(&h, &raw[i * 2], 2);
        v[i] = dtype_ == DType::f16 ? f16_to_float(h) : bf16_to_float(h);
      }
    }
    return v;
  }
  // All bytes 0xff: NaN in every float dtype, -1 in i64, 255 in u8; catches unwritten elements.
  void poison() {
    std::vector<uint8_t> raw(bytes(), 0xff);
    upload_raw(raw.data());
  }

 private:
  DType dtype_;
  int64_t n_;
  memory::DataPtr data_;
};

inline DeviceBuffer to_device(DType t, const std::vector<float>& v) {
  DeviceBuffer b(t, static_cast<int64_t>(v.size()));
  b.upload(v);
  return b;
}

// ||out - ref|| / ||ref|| (absolute when ref is zero); infinity when anything is NaN or sizes
// differ, so a NaN never passes.
inline double rel_error(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) || std::isnan(ref[i])) return INFINITY;
    double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// rel_error for outputs that hold NaN and infinities on purpose: NaN must stand where ref has
// NaN and nowhere else, an infinity must equal ref's, and the rest is rel_error of what is left.
// Infinity when any of that fails.
inline double rel_error_keeping_specials(const std::vector<float>& out,
                                         const std::vector<float>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  std::vector<float> out_finite, ref_finite;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) != std::isnan(ref[i])) return INFINITY;
    if (std::isnan(ref[i])) continue;
    if (std::isinf(out[i]) || std::isinf(ref[i])) {
      if (out[i] != ref[i]) return INFINITY;
      continue;
    }
    out_finite.push_back(out[i]);
    ref_finite.push_back(ref[i]);
  }
  return rel_error(out_finite, ref_finite);
}

using kernels::Tf32Scope;  // f32 convolutions with or without TF32, for one scope

#define EXPECT_CLOSE(out, ref, tol)                                         \
  do {                                                                      \
    double err_ = ::frugal::gputest::rel_error(out, ref);                   \
    EXPECT_LE(err_, (tol)) << #out " vs " #ref ": relative error " << err_; \
  } while (0)

#define EXPECT_CLOSE_KEEPING_SPECIALS(out, ref, tol)                       \
  do {                                                                     \
    double err_ = ::frugal::gputest::rel_error_keeping_specials(out, ref); \
    EXPECT_LE(err_, (tol)) << #out " vs " #ref                             \
                                   ": NaN or infinity moved, or relative " \
                                   "error "                                \
                           << err_;                                        \
  } while (0)

}  // namespace frugal::gputest
