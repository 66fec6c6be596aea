// The dataset interface the DataLoader reads: random access to (image, label) pairs, images HWC
// float. Implementations are read-only after construction so get() is safe from many threads.
//
//   std::shared_ptr<const data::Dataset> ds = std::make_shared<data::FashionMnist>(dir, true);
//   std::vector<float> img(ds->sample_shape().numel());
//   int64_t label;
//   ds->get(0, img.data(), &label);
#pragma once

#include <cstdint>

#include "base/shape.h"

namespace frugal::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;  // [H, W, C]
  virtual int64_t num_classes() const = 0;
  // Writes sample i: image [H, W, C] into `image` (sample_shape().numel() floats) and its class
  // in [0, num_classes()) into *label. Throws frugal::Error when i is out of range.
  virtual void get(int64_t i, float* image, int64_t* label) const = 0;
};

}  // namespace frugal::data
