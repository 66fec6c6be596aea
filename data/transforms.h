// Per-sample transforms on HWC float images, composable and deterministic: each sample gets its
// own SampleRng seeded from (epoch seed, dataset index), so results never depend on which worker
// thread ran them or in what order. Transforms are immutable and shared by all workers.
//
//   auto t = data::Compose({data::make_resize(32, 32), data::make_repeat_channels(3),
//                           data::make_normalize({0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f})});
//   std::vector<float> img = ...;  Shape shape{28, 28, 1};
//   data::SampleRng rng(data::sample_seed(epoch_seed, index));
//   t.apply(img, shape, rng);      // img is now [32, 32, 3]
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/shape.h"

namespace frugal::data {

// The seed of one sample's random stream.
uint64_t sample_seed(uint64_t epoch_seed, int64_t index);

// A counter-based stream (kernels::uniform01 over successive counters).
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : seed_(seed) {}
  float uniform();             // [0, 1)
  int64_t randint(int64_t n);  // uniform in [0, n), n >= 1

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

class Transform {
 public:
  virtual ~Transform() = default;
  // The image's shape after this transform; throws when `in` is not accepted.
  virtual Shape output_shape(const Shape& in) const = 0;
  // Transforms image ([H, W, C] = shape) in place, updating shape. `image` keeps its capacity
  // between calls so a worker reusing one vector stops allocating after the first sample.
  virtual void apply(std::vector<float>& image, Shape& shape, SampleRng& rng) const = 0;
};

using TransformPtr = std::shared_ptr<const Transform>;

// Runs its transforms in order.
class Compose : public Transform {
 public:
  Compose() = default;
  explicit Compose(std::vector<TransformPtr> transforms) : transforms_(std::move(transforms)) {}
  Shape output_shape(const Shape& in) const override;
  void apply(std::vector<float>& image, Shape& shape, SampleRng& rng) const override;
  bool empty() const { return transforms_.empty(); }

 private:
  std::vector<TransformPtr> transforms_;
};

// (x - mean[c]) / std[c] per channel.
TransformPtr make_normalize(std::vector<float> mean, std::vector<float> std);
// Bilinear resize to [h, w], align_corners=false: PyTorch's F.interpolate(mode="bilinear",
// antialias=False). torchvision's Resize antialiases a downscale (antialias=True, its default
// since 0.17), so the two agree where frugal resizes by default (Fashion-MNIST's 28 up to 32) and
// differ below 28 (--image-size 8 to 27), where this one samples without a low-pass filter.
TransformPtr make_resize(int64_t h, int64_t w);
// Zero-pads `padding` on every side, then crops a random [h, w] window (torchvision RandomCrop).
TransformPtr make_random_crop(int64_t h, int64_t w, int64_t padding);
// Mirrors the width axis with probability p (always draws one number, flipped or not).
TransformPtr make_random_horizontal_flip(float p = 0.5f);
// Tiles the channels n times: [H, W, C] -> [H, W, C * n], channel k = input channel k % C.
TransformPtr make_repeat_channels(int64_t n);

}  // namespace frugal::data
