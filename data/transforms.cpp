// The per-sample transforms. Each writes into a scratch vector and swaps it in, except the ones
// that can work in place (normalize, flip).
#include "data/transforms.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "kernels/random.h"

namespace frugal::data {

uint64_t sample_seed(uint64_t epoch_seed, int64_t index) {
  return kernels::mix64(kernels::mix64(epoch_seed) ^
                        (static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull + 0x5eedull));
}

float SampleRng::uniform() { return kernels::uniform01(seed_, counter_++); }

int64_t SampleRng::randint(int64_t n) {
  FRUGAL_CHECK(n >= 1, "SampleRng::randint: empty range ", n);
  int64_t v = static_cast<int64_t>(uniform() * static_cast<float>(n));
  return v < n ? v : n - 1;
}

namespace {

void check_hwc(const Shape& s, const char* op) {
  FRUGAL_CHECK(s.ndim() == 3, op, ": expects an [H, W, C] image, got ", s);
}

class Normalize : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std)
      : mean_(std::move(mean)), std_(std::move(std)) {
    FRUGAL_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize: ", mean_.size(),
                 " means and ", std_.size(), " stds");
    for (float s : std_) FRUGAL_CHECK(s != 0.0f, "Normalize: std must be non-zero");
  }
  Shape output_shape(const Shape& in) const override {
    check_hwc(in, "Normalize");
    FRUGAL_CHECK(in[2] == static_cast<int64_t>(mean_.size()), "Normalize: image ", in, " has ",
                 in[2], " channels, mean/std have ", mean_.size());
    return in;
  }
  void apply(std::vector<float>& image, Shape& shape, SampleRng&) const override {
    output_shape(shape);
    const size_t c = mean_.size();
    for (size_t i = 0; i < image.size(); ++i) image[i] = (image[i] - mean_[i % c]) / std_[i % c];
  }

 private:
  std::vector<float> mean_, std_;
};

// PyTorch's area_pixel_compute_source_index for align_corners=false, clamped at 0.
struct Tap {
  int64_t i0, i1;
  float w1;  // weight of i1; i0 gets 1 - w1
};
Tap source_tap(int64_t dst, int64_t in, int64_t out) {
  float scale = static_cast<float>(in) / static_cast<float>(out);
  float src = std::max(scale * (static_cast<float>(dst) + 0.5f) - 0.5f, 0.0f);
  int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
  int64_t i1 = std::min(i0 + 1, in - 1);
  return {i0, i1, src - static_cast<float>(i0)};
}

class Resize : public Transform {
 public:
  Resize(int64_t h, int64_t w) : h_(h), w_(w) {
    FRUGAL_CHECK(h >= 1 && w >= 1, "Resize: bad target size ", h, "x", w);
  }
  Shape output_shape(const Shape& in) const override {
    check_hwc(in, "Resize");
    FRUGAL_CHECK(in[0] >= 1 && in[1] >= 1, "Resize: empty image ", in);
    return {h_, w_, in[2]};
  }
  void apply(std::vector<float>& image, Shape& shape, SampleRng&) const override {
    Shape out_shape = output_shape(shape);
    const int64_t ih = shape[0], iw = shape[1], c = shape[2];
    thread_local std::vector<float> out;  // per worker thread: reused, never shrunk
    out.resize(static_cast<size_t>(out_shape.numel()));
    for (int64_t y = 0; y < h_; ++y) {
      Tap ty = source_tap(y, ih, h_);
      for (int64_t x = 0; x < w_; ++x) {
        Tap tx = source_tap(x, iw, w_);
        const float* p00 = &image[static_cast<size_t>((ty.i0 * iw + tx.i0) * c)];
        const float* p01 = &image[static_cast<size_t>((ty.i0 * iw + tx.i1) * c)];
        const float* p10 = &image[static_cast<size_t>((ty.i1 * iw + tx.i0) * c)];
        const float* p11 = &image[static_cast<size_t>((ty.i1 * iw + tx.i1) * c)];
        float* o = &out[static_cast<size_t>((y * w_ + x) * c)];
        for (int64_t k = 0; k < c; ++k) {
          o[k] = (1 - ty.w1) * ((1 - tx.w1) * p00[k] + tx.w1 * p01[k]) +
                 ty.w1 * ((1 - tx.w1) * p10[k] + tx.w1 * p11[k]);
        }
      }
    }
    image.swap(out);
    shape = out_shape;
  }

 private:
  int64_t h_, w_;
};

class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t h, int64_t w, int64_t padding) : h_(h), w_(w), pad_(padding) {
    FRUGAL_CHECK(h >= 1 && w >= 1 && padding >= 0, "RandomCrop: bad size ", h, "x", w,
                 " or padding ", padding);
  }
  Shape output_shape(const Shape& in) const override {
    check_hwc(in, "RandomCrop");
    FRUGAL_CHECK(in[0] + 2 * pad_ >= h_ && in[1] + 2 * pad_ >= w_, "RandomCrop: crop ", h_, "x", w_,
                 " larger than the padded image ", in, " + ", pad_, " on each side");
    return {h_, w_, in[2]};
  }
  void apply(std::vector<float>& image, Shape& shape, SampleRng& rng) const override {
    Shape out_shape = output_shape(shape);
    const int64_t ih = shape[0], iw = shape[1], c = shape[2];
    // Top-left corner of the window in padded coordinates (row first, as torchvision draws).
    const int64_t top = rng.randint(ih + 2 * pad_ - h_ + 1) - pad_;
    const int64_t left = rng.randint(iw + 2 * pad_ - w_ + 1) - pad_;
    thread_local std::vector<float> out;
    out.assign(static_cast<size_t>(out_shape.numel()), 0.0f);
    for (int64_t y = 0; y < h_; ++y) {
      int64_t sy = y + top;
      if (sy < 0 || sy >= ih) continue;
      for (int64_t x = 0; x < w_; ++x) {
        int64_t sx = x + left;
        if (sx < 0 || sx >= iw) continue;
        std::copy_n(&image[static_cast<size_t>((sy * iw + sx) * c)], c,
                    &out[static_cast<size_t>((y * w_ + x) * c)]);
      }
    }
    image.swap(out);
    shape = out_shape;
  }

 private:
  int64_t h_, w_, pad_;
};

class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(float p) : p_(p) {
    FRUGAL_CHECK(p >= 0.0f && p <= 1.0f, "RandomHorizontalFlip: p = ", p, " not in [0, 1]");
  }
  Shape output_shape(const Shape& in) const override {
    check_hwc(in, "RandomHorizontalFlip");
    return in;
  }
  void apply(std::vector<float>& image, Shape& shape, SampleRng& rng) const override {
    output_shape(shape);
    if (!(rng.uniform() < p_)) return;
    const int64_t h = shape[0], w = shape[1], c = shape[2];
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w / 2; ++x) {
        float* a = &image[static_cast<size_t>((y * w + x) * c)];
        float* b = &image[static_cast<size_t>((y * w + (w - 1 - x)) * c)];
        std::swap_ranges(a, a + c, b);
      }
    }
  }

 private:
  float p_;
};

class RepeatChannels : public Transform {
 public:
  explicit RepeatChannels(int64_t n) : n_(n) {
    FRUGAL_CHECK(n >= 1, "RepeatChannels: n = ", n, " must be >= 1");
  }
  Shape output_shape(const Shape& in) const override {
    check_hwc(in, "RepeatChannels");
    return {in[0], in[1], in[2] * n_};
  }
  void apply(std::vector<float>& image, Shape& shape, SampleRng&) const override {
    Shape out_shape = output_shape(shape);
    const int64_t pixels = shape[0] * shape[1], c = shape[2];
    thread_local std::vector<float> out;
    out.resize(static_cast<size_t>(out_shape.numel()));
    for (int64_t p = 0; p < pixels; ++p) {
      for (int64_t r = 0; r < n_; ++r) {
        std::copy_n(&image[static_cast<size_t>(p * c)], c,
                    &out[static_cast<size_t>((p * n_ + r) * c)]);
      }
    }
    image.swap(out);
    shape = out_shape;
  }

 private:
  int64_t n_;
};

}  // namespace

Shape Compose::output_shape(const Shape& in) const {
  Shape s = in;
  for (const TransformPtr& t : transforms_) s = t->output_shape(s);
  return s;
}

void Compose::apply(std::vector<float>& image, Shape& shape, SampleRng& rng) const {
  for (const TransformPtr& t : transforms_) t->apply(image, shape, rng);
}

TransformPtr make_normalize(std::vector<float> mean, std::vector<float> std) {
  return std::make_shared<Normalize>(std::move(mean), std::move(std));
}
TransformPtr make_resize(int64_t h, int64_t w) { return std::make_shared<Resize>(h, w); }
TransformPtr make_random_crop(int64_t h, int64_t w, int64_t padding) {
  return std::make_shared<RandomCrop>(h, w, padding);
}
TransformPtr make_random_horizontal_flip(float p) {
  return std::make_shared<RandomHorizontalFlip>(p);
}
TransformPtr make_repeat_channels(int64_t n) { return std::make_shared<RepeatChannels>(n); }

}  // namespace frugal::data
