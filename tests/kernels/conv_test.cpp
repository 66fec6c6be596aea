// CPU conv2d (pointwise, im2col and depthwise paths) against a naive 7-loop reference in double:
// forward, and backward input/weight/bias against the reference's own analytic gradient, plus
// a finite-difference check of the kernels' gradients in f64.
#include "kernels/conv.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/device.h"
#include "kernels/conv_test_util.h"

using namespace frugal;
using frugal::testing::cast_vec;
using frugal::testing::central_difference;
using frugal::testing::expect_close;
using frugal::testing::random_vec;
using frugal::testing::rounded;
using frugal::testing::tolerance;
using kernels::Conv2dShape;

namespace {

struct Case {
  std::string name;
  Conv2dShape s;
  bool bias;
};

Conv2dShape shape(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t kh, int64_t kw,
                  int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                  int64_t groups) {
  Conv2dShape s;
  s.n = n, s.h = h, s.w = w, s.c = c, s.k = k, s.kh = kh, s.kw = kw;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw, s.dil_h = dh, s.dil_w = dw;
  s.groups = groups;
  return s;
}

int64_t x_size(const Conv2dShape& s) { return s.n * s.h * s.w * s.c; }
int64_t y_size(const Conv2dShape& s) { return s.n * s.oh() * s.ow() * s.k; }
int64_t w_size(const Conv2dShape& s) { return s.k * s.kh * s.kw * s.cin_per_group(); }

// Calls f(x index, w index, y index) for every (output, tap, input channel) that multiplies.
template <typename F>
void for_each_term(const Conv2dShape& s, F&& f) {
  int64_t cg = s.cin_per_group(), kg = s.cout_per_group();
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t oh = 0; oh < s.oh(); ++oh)
      for (int64_t ow = 0; ow < s.ow(); ++ow)
        for (int64_t k = 0; k < s.k; ++k)
          for (int64_t i = 0; i < s.kh; ++i)
            for (int64_t j = 0; j < s.kw; ++j)
              for (int64_t cc = 0; cc < cg; ++cc) {
                int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
                int64_t iw = ow * s.stride_w - s.pad_w + j * s.dil_w;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                int64_t c = (k / kg) * cg + cc;
                f(((n * s.h + ih) * s.w + iw) * s.c + c, ((k * s.kh + i) * s.kw + j) * cg + cc,
                  ((n * s.oh() + oh) * s.ow() + ow) * s.k + k);
              }
}

struct Reference {
  std::vector<double> y, dx, dw, db;
};

Reference reference(const Conv2dShape& s, const std::vector<double>& x,
                    const std::vector<double>& w, const std::vector<double>* bias,
                    const std::vector<double>& dy) {
  Reference r;
  r.y.assign(static_cast<size_t>(y_size(s)), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(static_cast<size_t>(s.k), 0.0);
  for_each_term(s, [&](int64_t xi, int64_t wi, int64_t yi) {
    r.y[yi] += x[xi] * w[wi];
    r.dx[xi] += dy[yi] * w[wi];
    r.dw[wi] += dy[yi] * x[xi];
  });
  for (int64_t i = 0; i < y_size(s); ++i) {
    if (bias != nullptr) r.y[i] += (*bias)[i % s.k];
    r.db[i % s.k] += dy[i];
  }
  return r;
}

template <typename T>
void check_case(const Case& tc) {
  const Conv2dShape& s = tc.s;
  auto ctx = kernels::Context::of(Device::cpu());
  DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  auto x = rounded<T>(random_vec(x_size(s), 1));
  auto w = rounded<T>(random_vec(w_size(s), 2));
  auto b = rounded<T>(random_vec(s.k, 3));
  auto dy = rounded<T>(random_vec(y_size(s), 4));
  Reference ref = reference(s, x, w, tc.bias ? &b : nullptr, dy);

  auto xt = cast_vec<T>(x), wt = cast_vec<T>(w), bt = cast_vec<T>(b), dyt = cast_vec<T>(dy);
  std::vector<T> y(static_cast<size_t>(y_size(s)), T(7));  // stale values must be overwritten
  std::vector<T> dx(x.size(), T(7)), dw(w.size(), T(7)), db(b.size(), T(7));
  kernels::conv2d_forward(ctx, dt, s, xt.data(), wt.data(), tc.bias ? bt.data() : nullptr,
                          y.data());
  kernels::conv2d_backward_input(ctx, dt, s, dyt.data(), wt.data(), dx.data());
  kernels::conv2d_backward_weight(ctx, dt, dt, s, xt.data(), dyt.data(), dw.data(),
                                  tc.bias ? db.data() : nullptr);
  double tol = tolerance<T>();
  expect_close(ref.y, y, tol, tc.name + " forward " + s.str());
  expect_close(ref.dx, dx, tol, tc.name + " backward_input " + s.str());
  expect_close(ref.dw, dw, tol, tc.name + " backward_weight " + s.str());
  if (tc.bias) expect_close(ref.db, db, tol, tc.name + " backward_bias " + s.str());
}

std::vector<Case> cases() {
  return {
      {"pointwise", shape(2, 7, 5, 6, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1), true},
      {"pointwise_groups2", shape(3, 5, 3, 6, 4, 1, 1, 1, 1, 0, 0, 1, 1, 2), false},
      {"pointwise_stride2", shape(2, 7, 5, 4, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1), true},
      {"3x3_pad1", shape(2, 7, 5, 3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1), true},
      {"3x3_pad1_nobias", shape(2, 7, 5, 3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1), false},
      {"3x3_stride2", shape(2, 7, 5, 5, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1), false},
      {"3x3_dilation2", shape(2, 7, 6, 3, 2, 3, 3, 1, 1, 2, 2, 2, 2, 1), true},
      {"3x3_groups2", shape(2, 7, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2), true},
      {"2x3_mixed", shape(2, 7, 5, 4, 3, 2, 3, 2, 1, 0, 1, 1, 2, 1), true},
      {"groups3_stride2", shape(1, 9, 7, 6, 9, 3, 3, 2, 2, 1, 1, 1, 1, 3), false},
      {"depthwise_s1", shape(2, 7, 5, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 7), true},
      {"depthwise_s2", shape(2, 7, 5, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 7), false},
      {"depthwise_s2_bias", shape(3, 8, 6, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, 5), true},
      {"depthwise_dil2_3x2", shape(2, 7, 5, 3, 3, 3, 2, 1, 1, 2, 1, 2, 2, 3), true},
      {"depthwise_1x1", shape(2, 3, 3, 4, 4, 1, 1, 1, 1, 0, 0, 1, 1, 4), true},
      // several im2col chunks (the column buffer holds about 7 of these images)
      {"3x3_multichunk", shape(9, 64, 64, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1), true},
      // deep enough that the weight-gradient GEMM splits N*H*W over threads
      {"pointwise_split_depth", shape(4, 16, 15, 32, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1), true},
      // large enough for the parallel depthwise weight-gradient and bias-gradient chunks
      {"depthwise_parallel", shape(8, 16, 16, 24, 24, 3, 3, 1, 1, 1, 1, 1, 1, 24), true},
  };
}

}  // namespace

TEST(Conv2dCpu, MatchesReferenceF64) {
  for (const Case& tc : cases()) check_case<double>(tc);
}

TEST(Conv2dCpu, MatchesReferenceF32) {
  for (const Case& tc : cases()) check_case<float>(tc);
}

// The kernels' own gradients of L = sum(y * r) against central differences of their forward.
TEST(Conv2dCpu, GradientsMatchFiniteDifferencesF64) {
  auto ctx = kernels::Context::of(Device::cpu());
  for (const Conv2dShape& s : {shape(1, 5, 4, 4, 2, 3, 3, 2, 1, 1, 1, 1, 1, 2),
                               shape(1, 5, 4, 3, 3, 3, 3, 1, 2, 1, 1, 1, 1, 3),
                               shape(2, 3, 3, 3, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1)}) {
    auto x = random_vec(x_size(s), 11), w = random_vec(w_size(s), 12);
    auto b = random_vec(s.k, 13), r = random_vec(y_size(s), 14);
    auto loss = [&]() {
      std::vector<double> y(static_cast<size_t>(y_size(s)));
      kernels::conv2d_forward(ctx, DType::f64, s, x.data(), w.data(), b.data(), y.data());
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += y[i] * r[i];
      return l;
    };
    auto fd = [&](std::vector<double>& v) { return central_difference(loss, v, 1e-5); };
    std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
    kernels::conv2d_backward_input(ctx, DType::f64, s, r.data(), w.data(), dx.data());
    kernels::conv2d_backward_weight(ctx, DType::f64, DType::f64, s, x.data(), r.data(), dw.data(),
                                    db.data());
    expect_close(fd(x), dx, 1e-7, "fd dx " + s.str());
    expect_close(fd(w), dw, 1e-7, "fd dw " + s.str());
    expect_close(fd(b), db, 1e-7, "fd dbias " + s.str());
  }
}

TEST(Conv2dCpu, EmptyBatchZeroesWeightGradient) {
  auto ctx = kernels::Context::of(Device::cpu());
  Conv2dShape s = shape(0, 5, 5, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  std::vector<float> w(static_cast<size_t>(w_size(s)), 1.f), dw(w.size(), 5.f), db(2, 5.f);
  kernels::conv2d_forward(ctx, DType::f32, s, nullptr, w.data(), nullptr, nullptr);
  kernels::conv2d_backward_weight(ctx, DType::f32, DType::f32, s, nullptr, nullptr, dw.data(),
                                  db.data());
  for (float v : dw) EXPECT_EQ(v, 0.f);
  for (float v : db) EXPECT_EQ(v, 0.f);
}

TEST(Conv2dCpu, RejectsBadShapesNamingThem) {
  auto ctx = kernels::Context::of(Device::cpu());
  auto expect_error = [&](const Conv2dShape& s, const std::string& needle) {
    try {
      kernels::conv2d_forward(ctx, DType::f32, s, nullptr, nullptr, nullptr, nullptr);
      ADD_FAILURE() << "no error for " << s.str();
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_NE(msg.find(s.str()), std::string::npos) << msg;
      EXPECT_NE(msg.find("conv2d_forward"), std::string::npos) << msg;
    }
  };
  expect_error(shape(1, 5, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4), "input channels");
  expect_error(shape(1, 5, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 3), "output channels");
  expect_error(shape(1, 2, 2, 3, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1), "empty output");
  std::vector<int> dummy(16);
  try {
    Conv2dShape s = shape(1, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1);
    kernels::conv2d_forward(ctx, DType::i64, s, dummy.data(), dummy.data(), nullptr, dummy.data());
    ADD_FAILURE() << "no error for i64";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("i64"), std::string::npos) << e.what();
  }
}
