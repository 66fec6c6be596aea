// Each transform against a hand computation or a double-precision reference loop.
#include "data/transforms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "base/error.h"

using namespace frugal;
using namespace frugal::data;

namespace {

std::vector<float> random_image(const Shape& s, uint64_t seed) {
  SampleRng r(seed);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (float& x : v) x = r.uniform() * 2.0f - 0.7f;
  return v;
}

// Bilinear reference, align_corners=false, written from PyTorch's formula in double.
std::vector<double> resize_reference(const std::vector<float>& in, int64_t ih, int64_t iw,
                                     int64_t c, int64_t oh, int64_t ow) {
  auto src = [](int64_t d, int64_t i, int64_t o) {
    double s = (d + 0.5) * double(i) / double(o) - 0.5;
    return s < 0 ? 0.0 : s;
  };
  std::vector<double> out(static_cast<size_t>(oh * ow * c));
  for (int64_t y = 0; y < oh; ++y) {
    double sy = src(y, ih, oh);
    int64_t y0 = static_cast<int64_t>(std::floor(sy)), y1 = std::min(y0 + 1, ih - 1);
    double wy = sy - y0;
    for (int64_t x = 0; x < ow; ++x) {
      double sx = src(x, iw, ow);
      int64_t x0 = static_cast<int64_t>(std::floor(sx)), x1 = std::min(x0 + 1, iw - 1);
      double wx = sx - x0;
      for (int64_t k = 0; k < c; ++k) {
        auto at = [&](int64_t yy, int64_t xx) { return double(in[(yy * iw + xx) * c + k]); };
        out[(y * ow + x) * c + k] = (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) +
                                    wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1));
      }
    }
  }
  return out;
}

}  // namespace

TEST(Transforms, ResizeTwoByTwoToFourByFourMatchesPyTorch) {
  // torch.nn.functional.interpolate([[1, 2], [3, 4]], size=4, mode="bilinear",
  // align_corners=False)
  const std::vector<float> expected = {1.0f, 1.25f, 1.75f, 2.0f, 1.5f, 1.75f, 2.25f, 2.5f,
                                       2.5f, 2.75f, 3.25f, 3.5f, 3.0f, 3.25f, 3.75f, 4.0f};
  std::vector<float> img = {1, 2, 3, 4};
  Shape s{2, 2, 1};
  SampleRng rng(0);
  make_resize(4, 4)->apply(img, s, rng);
  EXPECT_EQ(s, (Shape{4, 4, 1}));
  ASSERT_EQ(img.size(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(img[i], expected[i]) << i;
}

TEST(Transforms, ResizeOddSizesAgainstReference) {
  struct Case {
    int64_t ih, iw, c, oh, ow;
  };
  for (Case t :
       {Case{5, 7, 2, 9, 4}, Case{28, 28, 1, 32, 32}, Case{6, 3, 3, 2, 11}, Case{1, 1, 2, 3, 3}}) {
    Shape s{t.ih, t.iw, t.c};
    std::vector<float> img = random_image(s, t.ih * 100 + t.ow);
    std::vector<double> ref = resize_reference(img, t.ih, t.iw, t.c, t.oh, t.ow);
    SampleRng rng(0);
    make_resize(t.oh, t.ow)->apply(img, s, rng);
    ASSERT_EQ(s, (Shape{t.oh, t.ow, t.c}));
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(img[i], ref[i], 1e-5) << i;
  }
}

TEST(Transforms, HorizontalFlip) {
  Shape s{2, 3, 2};
  std::vector<float> img = random_image(s, 5), orig = img;
  SampleRng rng(1);
  make_random_horizontal_flip(1.0f)->apply(img, s, rng);
  for (int64_t y = 0; y < 2; ++y)
    for (int64_t x = 0; x < 3; ++x)
      for (int64_t k = 0; k < 2; ++k)
        EXPECT_EQ(img[(y * 3 + x) * 2 + k], orig[(y * 3 + (2 - x)) * 2 + k]);
  make_random_horizontal_flip(0.0f)->apply(img, s, rng);  // never flips
  make_random_horizontal_flip(1.0f)->apply(img, s, rng);  // flips back
  EXPECT_EQ(img, orig);
  // p = 0.5: about half of the samples flip, and the decision is a function of the seed.
  auto flip = make_random_horizontal_flip(0.5f);
  int flipped = 0;
  for (int64_t i = 0; i < 400; ++i) {
    std::vector<float> a = orig, b = orig;
    SampleRng r1(sample_seed(9, i)), r2(sample_seed(9, i));
    flip->apply(a, s, r1);
    flip->apply(b, s, r2);
    ASSERT_EQ(a, b);
    flipped += a != orig;
  }
  EXPECT_GT(flipped, 150);
  EXPECT_LT(flipped, 250);
}

TEST(Transforms, RandomCropWithZeroPadding) {
  const int64_t h = 5, w = 4, c = 2, pad = 2, ch = 5, cw = 3;
  Shape in{h, w, c};
  std::vector<float> orig = random_image(in, 6);
  for (float& v : orig) v += 5.0f;  // no zeros in the image, so padding is recognisable
  auto crop = make_random_crop(ch, cw, pad);
  std::set<std::pair<int64_t, int64_t>> corners;
  for (int64_t i = 0; i < 300; ++i) {
    std::vector<float> img = orig;
    Shape s = in;
    SampleRng rng(sample_seed(3, i));
    crop->apply(img, s, rng);
    ASSERT_EQ(s, (Shape{ch, cw, c}));
    // The same draws, by hand: top then left, each uniform over the padded range.
    SampleRng hand(sample_seed(3, i));
    int64_t top = hand.randint(h + 2 * pad - ch + 1) - pad;
    int64_t left = hand.randint(w + 2 * pad - cw + 1) - pad;
    corners.insert({top, left});
    for (int64_t y = 0; y < ch; ++y)
      for (int64_t x = 0; x < cw; ++x)
        for (int64_t k = 0; k < c; ++k) {
          int64_t sy = y + top, sx = x + left;
          float want =
              (sy < 0 || sy >= h || sx < 0 || sx >= w) ? 0.0f : orig[(sy * w + sx) * c + k];
          ASSERT_EQ(img[(y * cw + x) * c + k], want);
        }
  }
  // Every corner of the padded range is reachable: 5 rows x 6 columns.
  EXPECT_EQ(corners.size(), 30u);
  EXPECT_THROW(make_random_crop(10, 10, 2)->output_shape(in), Error);
}

TEST(Transforms, NormalizeAndRepeatChannels) {
  std::vector<float> img = {0.0f, 0.5f, 1.0f, 0.25f};  // [2, 2, 1]
  Shape s{2, 2, 1};
  SampleRng rng(0);
  make_repeat_channels(3)->apply(img, s, rng);
  ASSERT_EQ(s, (Shape{2, 2, 3}));
  const std::vector<float> tiled = {0, 0, 0, 0.5f, 0.5f, 0.5f, 1, 1, 1, 0.25f, 0.25f, 0.25f};
  EXPECT_EQ(img, tiled);
  make_normalize({0.5f, 0.25f, 1.0f}, {0.5f, 2.0f, 0.25f})->apply(img, s, rng);
  const std::vector<float> want = {-1.0f, -0.125f, -4.0f, 0.0f,  0.125f, -2.0f,
                                   1.0f,  0.375f,  0.0f,  -0.5f, 0.0f,   -3.0f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(img[i], want[i]) << i;
  EXPECT_THROW(make_normalize({0.5f}, {0.5f})->output_shape(s), Error);
  EXPECT_THROW(make_normalize({0.5f}, {0.0f}), Error);
}

TEST(Transforms, ComposeChainsShapesAndValues) {
  Compose t({make_resize(4, 4), make_repeat_channels(3), make_normalize({1, 2, 3}, {2, 2, 2})});
  EXPECT_EQ(t.output_shape(Shape{2, 2, 1}), (Shape{4, 4, 3}));
  std::vector<float> img = {1, 2, 3, 4};
  Shape s{2, 2, 1};
  SampleRng rng(0);
  t.apply(img, s, rng);
  ASSERT_EQ(s, (Shape{4, 4, 3}));
  // Pixel (0, 1) resizes to 1.25 (see the PyTorch case), then (1.25 - mean[k]) / 2.
  EXPECT_FLOAT_EQ(img[3 + 0], (1.25f - 1) / 2);
  EXPECT_FLOAT_EQ(img[3 + 1], (1.25f - 2) / 2);
  EXPECT_FLOAT_EQ(img[3 + 2], (1.25f - 3) / 2);
  EXPECT_THROW(Compose({make_normalize({0, 0}, {1, 1})}).output_shape(Shape{2, 2, 1}), Error);
}
