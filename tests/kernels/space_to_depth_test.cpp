// Note [Stride-2 stems as stride-1 convolutions]: the rewrite's index arithmetic, checked on the
// CPU in f64 against the convolution itself: conv(x, w) == conv(z, w2) for the forward, and the
// weight gradient of the stride-1 convolution, gathered back through w2_source, == the stride-2
// convolution's. The CUDA kernels (kernels/cuda/space_to_depth_conv.cu) use the same functions.
#include "kernels/space_to_depth.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/device.h"
#include "base/error.h"
#include "kernels/conv_test_util.h"

using namespace frugal;
using frugal::testing::expect_close;
using frugal::testing::random_vec;
using kernels::Conv2dShape;

namespace {

Conv2dShape stem(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t kh, int64_t kw,
                 int64_t pad_h, int64_t pad_w) {
  Conv2dShape s;
  s.n = n, s.h = h, s.w = w, s.c = c, s.k = k, s.kh = kh, s.kw = kw;
  s.stride_h = s.stride_w = 2;
  s.pad_h = pad_h, s.pad_w = pad_w;
  return s;
}

int i32(int64_t v) { return static_cast<int>(v); }

// fn(w_at, w2_at) for each tap of w2 that holds one of w's, through w2_source: the flat indices of
// the two.
template <typename Fn>
void for_each_tap(const Conv2dShape& s, const kernels::SpaceToDepth& r, Fn fn) {
  const Conv2dShape& in = r.inner;
  for (int64_t k = 0; k < in.k; ++k) {
    for (int64_t ra = 0; ra < in.kh; ++ra) {
      for (int64_t qb = 0; qb < in.kw; ++qb) {
        for (int64_t ch2 = 0; ch2 < in.c; ++ch2) {
          int i = 0, j = 0, ch = 0;
          if (kernels::w2_source(i32(s.c), i32(s.kh), i32(s.kw), i32(s.pad_h), i32(s.pad_w),
                                 i32(r.row_first), i32(r.col_first), i32(ra), i32(qb), i32(ch2), &i,
                                 &j, &ch)) {
            fn(static_cast<size_t>(((k * s.kh + i) * s.kw + j) * s.c + ch),
               static_cast<size_t>(((k * in.kh + ra) * in.kw + qb) * in.c + ch2));
          }
        }
      }
    }
  }
}

// z from x and w2 from w through z_source and w2_source.
void rewrite(const Conv2dShape& s, const kernels::SpaceToDepth& r, const std::vector<double>& x,
             const std::vector<double>& w, std::vector<double>& z, std::vector<double>& w2) {
  const Conv2dShape& in = r.inner;
  z.assign(static_cast<size_t>(in.n * in.h * in.w * in.c), 0.0);
  for (int64_t n = 0; n < in.n; ++n) {
    for (int64_t row = 0; row < in.h; ++row) {
      for (int64_t col = 0; col < in.w; ++col) {
        for (int64_t ch2 = 0; ch2 < in.c; ++ch2) {
          int ih = 0, iw = 0, ch = 0;
          if (kernels::z_source(i32(s.c), i32(s.h), i32(s.w), i32(r.row_first), i32(r.col_first),
                                i32(row), i32(col), i32(ch2), &ih, &iw, &ch)) {
            z[static_cast<size_t>(((n * in.h + row) * in.w + col) * in.c + ch2)] =
                x[static_cast<size_t>(((n * s.h + ih) * s.w + iw) * s.c + ch)];
          }
        }
      }
    }
  }
  w2.assign(static_cast<size_t>(in.k * in.kh * in.kw * in.c), 0.0);
  for_each_tap(s, r, [&](size_t w_at, size_t w2_at) { w2[w2_at] = w[w_at]; });
}

void expect_rewrite_matches(const Conv2dShape& s) {
  SCOPED_TRACE(s.str());
  const kernels::SpaceToDepth r = kernels::space_to_depth(s);
  const Conv2dShape& in = r.inner;
  ASSERT_EQ(in.oh(), s.oh());
  ASSERT_EQ(in.ow(), s.ow());
  ASSERT_EQ(in.c % 8, 0);
  const auto ctx = kernels::Context::of(Device::cpu());
  const int64_t nx = s.n * s.h * s.w * s.c, ny = s.n * s.oh() * s.ow() * s.k;
  const int64_t nw = s.k * s.kh * s.kw * s.c;
  std::vector<double> x = random_vec(nx, 1), w = random_vec(nw, 2), dy = random_vec(ny, 3);
  std::vector<double> z, w2;
  rewrite(s, r, x, w, z, w2);

  std::vector<double> y(static_cast<size_t>(ny)), y2(static_cast<size_t>(ny));
  kernels::conv2d_forward(ctx, DType::f64, s, x.data(), w.data(), nullptr, y.data());
  kernels::conv2d_forward(ctx, DType::f64, in, z.data(), w2.data(), nullptr, y2.data());
  expect_close(y, y2, 1e-12, "forward");

  // dw2's taps that come from w hold dw; the others (w2's zeros) are dropped. Each of dw's
  // elements must be reached exactly once.
  std::vector<double> dw(static_cast<size_t>(nw)), dw2(w2.size());
  kernels::conv2d_backward_weight(ctx, DType::f64, DType::f64, s, x.data(), dy.data(), dw.data(),
                                  nullptr);
  kernels::conv2d_backward_weight(ctx, DType::f64, DType::f64, in, z.data(), dy.data(), dw2.data(),
                                  nullptr);
  std::vector<double> gathered(static_cast<size_t>(nw), 0.0);
  std::vector<int> reached(static_cast<size_t>(nw), 0);
  for_each_tap(s, r, [&](size_t w_at, size_t w2_at) {
    gathered[w_at] = dw2[w2_at];
    ++reached[w_at];
  });
  for (size_t e = 0; e < reached.size(); ++e) ASSERT_EQ(reached[e], 1) << "dw element " << e;
  expect_close(dw, gathered, 1e-12, "weight gradient");
}

TEST(SpaceToDepth, StemsRewriteAsStrideOneConvolutions) {
  expect_rewrite_matches(stem(2, 22, 22, 3, 8, 7, 7, 3, 3));  // ResNet's stem, small
  expect_rewrite_matches(stem(1, 23, 21, 3, 5, 7, 7, 3, 3));  // odd sizes: a last half block
  expect_rewrite_matches(stem(2, 17, 19, 1, 4, 5, 5, 2, 2));  // one channel, 5x5
  expect_rewrite_matches(stem(1, 16, 18, 4, 6, 5, 7, 1, 3));  // 4 channels, 5x7, pads 1 and 3
  expect_rewrite_matches(stem(1, 12, 12, 2, 3, 4, 4, 0, 0));  // an even kernel, no padding
  expect_rewrite_matches(stem(1, 15, 13, 3, 4, 7, 7, 4, 2));  // pad past half the kernel
}

TEST(SpaceToDepth, ResNetStemBecomesA4x4ConvolutionOver16Channels) {
  const kernels::SpaceToDepth r = kernels::space_to_depth(stem(128, 224, 224, 3, 64, 7, 7, 3, 3));
  EXPECT_EQ(r.row_first, -2);
  EXPECT_EQ(r.col_first, -2);
  EXPECT_EQ(r.inner.h, 115);
  EXPECT_EQ(r.inner.w, 115);
  EXPECT_EQ(r.inner.c, 16) << "12 channels used, padded to 8s";
  EXPECT_EQ(r.inner.kh, 4);
  EXPECT_EQ(r.inner.kw, 4);
  EXPECT_EQ(r.inner.stride_h, 1);
  EXPECT_EQ(r.inner.pad_h, 0);
  EXPECT_EQ(r.inner.oh(), 112);
}

TEST(SpaceToDepth, OtherShapesDoNotFitAndSayWhy) {
  EXPECT_FALSE(kernels::space_to_depth_fits(stem(8, 32, 32, 3, 16, 3, 3, 1, 1)))
      << "3x3: the few-channel kernels";
  EXPECT_FALSE(kernels::space_to_depth_fits(stem(8, 32, 32, 8, 16, 7, 7, 3, 3))) << "8 channels";
  Conv2dShape s = stem(8, 32, 32, 3, 16, 7, 7, 3, 3);
  s.stride_w = 1;
  EXPECT_FALSE(kernels::space_to_depth_fits(s)) << "stride 1 along W";
  s = stem(8, 32, 32, 3, 16, 7, 7, 3, 3);
  s.dil_h = 2;
  EXPECT_FALSE(kernels::space_to_depth_fits(s)) << "dilation";
  try {
    kernels::space_to_depth(s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("space_to_depth"), std::string::npos) << e.what();
  }
}

}  // namespace
