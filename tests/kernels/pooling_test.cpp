// CPU max, average and global average pooling against naive loops in double: overlapping
// windows, padding, ties (first argmax wins in backward), count_include_pad both ways.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/device.h"
#include "kernels/conv_test_util.h"
#include "kernels/pooling.h"

using namespace frugal;
using frugal::testing::cast_vec;
using frugal::testing::expect_close;
using frugal::testing::random_vec;
using frugal::testing::rounded;
using frugal::testing::tolerance;
using kernels::Pool2dShape;

namespace {

Pool2dShape pool(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t sh,
                 int64_t sw, int64_t ph, int64_t pw, bool include_pad = true) {
  Pool2dShape s;
  s.n = n, s.h = h, s.w = w, s.c = c, s.kh = kh, s.kw = kw;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  s.count_include_pad = include_pad;
  return s;
}

std::string str(const Pool2dShape& s) {
  return detail::str("x=[", s.n, ",", s.h, ",", s.w, ",", s.c, "] k=", s.kh, "x", s.kw, " s=",
                     s.stride_h, "x", s.stride_w, " p=", s.pad_h, "x", s.pad_w,
                     " include_pad=", s.count_include_pad);
}

std::vector<Pool2dShape> shapes() {
  return {pool(2, 7, 5, 3, 3, 3, 2, 2, 1, 1),  // overlapping, padded
          pool(2, 7, 5, 3, 2, 2, 2, 2, 0, 0),  // tiling, odd sizes drop the last row/column
          pool(1, 6, 7, 4, 3, 3, 1, 1, 1, 1),  // stride 1, heavy overlap
          pool(3, 5, 6, 2, 3, 2, 1, 2, 1, 1),  // asymmetric kernel and stride
          pool(2, 9, 9, 5, 3, 3, 2, 2, 0, 0, false)};
}

// Calls f(x index, y index, window position within the scan) for every window element that
// lies inside the input, in the scan order (ih, then iw).
template <typename F>
void for_each_window(const Pool2dShape& s, F&& f) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t oh = 0; oh < s.oh(); ++oh)
      for (int64_t ow = 0; ow < s.ow(); ++ow)
        for (int64_t c = 0; c < s.c; ++c)
          for (int64_t i = 0; i < s.kh; ++i)
            for (int64_t j = 0; j < s.kw; ++j) {
              int64_t ih = oh * s.stride_h - s.pad_h + i, iw = ow * s.stride_w - s.pad_w + j;
              if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
              f(((n * s.h + ih) * s.w + iw) * s.c + c, ((n * s.oh() + oh) * s.ow() + ow) * s.c + c);
            }
}

template <typename T>
void check_max(const Pool2dShape& s, const std::vector<double>& x) {
  auto ctx = kernels::Context::of(Device::cpu());
  DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  int64_t ny = s.n * s.oh() * s.ow() * s.c;
  auto dy = rounded<T>(random_vec(ny, 52));
  std::vector<double> want_y(ny, -INFINITY);
  std::vector<int64_t> arg(ny, -1);
  for_each_window(s, [&](int64_t xi, int64_t yi) {
    if (x[xi] > want_y[yi] || arg[yi] < 0) want_y[yi] = x[xi], arg[yi] = xi;
  });
  std::vector<double> want_dx(x.size(), 0.0);
  for (int64_t i = 0; i < ny; ++i) want_dx[arg[i]] += dy[i];
  auto xt = cast_vec<T>(x), dyt = cast_vec<T>(dy);
  std::vector<T> y(ny, T(5)), dx(x.size(), T(5));
  kernels::max_pool2d_forward(ctx, dt, s, xt.data(), y.data());
  kernels::max_pool2d_backward(ctx, dt, s, xt.data(), dyt.data(), dx.data());
  expect_close(want_y, y, tolerance<T>(), "max forward " + str(s));
  expect_close(want_dx, dx, tolerance<T>(), "max backward " + str(s));
}

template <typename T>
void check_avg(const Pool2dShape& s) {
  auto ctx = kernels::Context::of(Device::cpu());
  DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.c;
  auto x = rounded<T>(random_vec(nx, 61)), dy = rounded<T>(random_vec(ny, 62));
  std::vector<double> sum(ny, 0.0), count(ny, 0.0);
  for_each_window(s, [&](int64_t xi, int64_t yi) { sum[yi] += x[xi], count[yi] += 1; });
  std::vector<double> want_y(ny), want_dx(nx, 0.0);
  auto divisor = [&](int64_t yi) { return s.count_include_pad ? double(s.kh * s.kw) : count[yi]; };
  for (int64_t i = 0; i < ny; ++i) want_y[i] = sum[i] / divisor(i);
  for_each_window(s, [&](int64_t xi, int64_t yi) { want_dx[xi] += dy[yi] / divisor(yi); });
  auto xt = cast_vec<T>(x), dyt = cast_vec<T>(dy);
  std::vector<T> y(ny, T(5)), dx(nx, T(5));
  kernels::avg_pool2d_forward(ctx, dt, s, xt.data(), y.data());
  kernels::avg_pool2d_backward(ctx, dt, s, dyt.data(), dx.data());
  expect_close(want_y, y, tolerance<T>(), "avg forward " + str(s));
  expect_close(want_dx, dx, tolerance<T>(), "avg backward " + str(s));
}

}  // namespace

TEST(MaxPoolCpu, MatchesReference) {
  for (const Pool2dShape& s : shapes()) {
    auto x = random_vec(s.n * s.h * s.w * s.c, 51);
    check_max<float>(s, rounded<float>(x));
    check_max<double>(s, x);
  }
}

// Values from {0, 1, 2}: most windows hold several equal maxima, and overlapping windows share
// them, so dx must go to the first one in scan order and accumulate.
TEST(MaxPoolCpu, TiesGoToTheFirstMaximumAndAccumulate) {
  for (const Pool2dShape& s : shapes()) {
    auto x = random_vec(s.n * s.h * s.w * s.c, 53, 0.0, 3.0);
    for (double& v : x) v = std::floor(v);
    check_max<float>(s, x);
    check_max<double>(s, x);
  }
  // all-negative input: padding (which would read as 0) must never win
  Pool2dShape s = pool(1, 4, 4, 2, 3, 3, 2, 2, 1, 1);
  auto x = random_vec(32, 54, -3.0, -1.0);
  check_max<double>(s, x);
}

TEST(AvgPoolCpu, MatchesReferenceBothPadModes) {
  for (Pool2dShape s : shapes()) {
    for (bool include : {true, false}) {
      s.count_include_pad = include;
      check_avg<float>(s);
      check_avg<double>(s);
    }
  }
}

TEST(GlobalAvgPoolCpu, ForwardAndBackward) {
  auto ctx = kernels::Context::of(Device::cpu());
  const int64_t n = 5, hw = 7 * 3, c = 11;
  auto x = random_vec(n * hw * c, 71), dy = random_vec(n * c, 72);
  std::vector<double> want_y(n * c, 0.0), want_dx(n * hw * c);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t j = 0; j < c; ++j) {
        want_y[i * c + j] += x[(i * hw + p) * c + j] / hw;
        want_dx[(i * hw + p) * c + j] = dy[i * c + j] / hw;
      }
  std::vector<double> y(n * c), dx(n * hw * c);
  kernels::global_avg_pool_forward(ctx, DType::f64, n, hw, c, x.data(), y.data());
  kernels::global_avg_pool_backward(ctx, DType::f64, n, hw, c, dy.data(), dx.data());
  expect_close(want_y, y, tolerance<double>(), "global avg forward f64");
  expect_close(want_dx, dx, tolerance<double>(), "global avg backward f64");
  auto xf = cast_vec<float>(x), dyf = cast_vec<float>(dy);
  std::vector<float> yf(n * c), dxf(n * hw * c);
  kernels::global_avg_pool_forward(ctx, DType::f32, n, hw, c, xf.data(), yf.data());
  kernels::global_avg_pool_backward(ctx, DType::f32, n, hw, c, dyf.data(), dxf.data());
  expect_close(want_y, yf, 1e-6, "global avg forward f32");
  expect_close(want_dx, dxf, 1e-6, "global avg backward f32");
}

TEST(PoolCpu, RejectsPaddingWiderThanHalfTheKernel) {
  auto ctx = kernels::Context::of(Device::cpu());
  std::vector<float> x(16), y(16);
  EXPECT_THROW(kernels::max_pool2d_forward(ctx, DType::f32, pool(1, 4, 4, 1, 2, 2, 1, 1, 2, 2),
                                           x.data(), y.data()),
               Error);
}
