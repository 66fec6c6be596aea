// A dataset computed on the fly: sample i is a pure function of (seed, i), so it needs no storage
// and any shape or size is free. Each class has its own mean image; samples are that mean plus
// uniform noise, so a small network can learn the labels. A test split of the same task shares
// the class means and draws other samples (SyntheticOptions::split).
//
//   auto ds = std::make_shared<data::SyntheticDataset>(Shape{32, 32, 3}, /*classes=*/10,
//                                                      /*size=*/5000, /*seed=*/7);
#pragma once

#include <cstdint>

#include "data/dataset.h"

namespace frugal::data {

struct SyntheticOptions {
  float noise = 0.5f;  // sample = class_mean + noise * (U[0,1) - 0.5), class_mean in [0, 1)
  // Which samples of the seed's task: 0 the train split's; another value (kTestSplit) a split
  // of the same task (the seed's class means) whose labels and noise come from streams of their
  // own, so no sample repeats one of another split.
  uint64_t split = 0;
};
constexpr uint64_t kTestSplit = 1;

class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(Shape sample_shape, int64_t num_classes, int64_t size, uint64_t seed,
                   SyntheticOptions opts = {});

  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return classes_; }
  void get(int64_t i, float* image, int64_t* label) const override;

  int64_t label_of(int64_t i) const;
  // Element j of class c's mean image.
  float class_mean(int64_t c, int64_t j) const;

 private:
  Shape shape_;  // [H, W, C]
  int64_t classes_;
  int64_t size_;
  uint64_t seed_;
  SyntheticOptions opts_;
};

}  // namespace frugal::data
