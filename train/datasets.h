// Named data sets with the transforms the model zoo expects, for the command line and examples.
//   "fashion-mnist": grey images (28x28, or whatever size the files hold) -> resized to
//                    `image_size`, normalised; train adds flips and crops.
//   "synthetic":     random learnable images of any shape (benchmarks, dry runs, tests).
#pragma once

#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/transforms.h"

namespace frugal::train {

struct DataConfig {
  std::string name = "fashion-mnist";
  std::string dir = {};     // empty: the default Fashion-MNIST folder
  int64_t image_size = 32;  // side after resizing
  int64_t channels = 1;     // 3 repeats the grey channel
  int64_t limit = -1;       // use only the first `limit` training samples (-1: all); for
  int64_t test_limit = -1;  // "synthetic", the sizes of its sets (-1: synthetic_size, 1/4 of it)
  bool augment = true;      // random crop (padding 2) and horizontal flip when training
  bool need_train = true;   // false: the training split is not read (DataSplits::train is null)
  int64_t synthetic_classes = 10;
  int64_t synthetic_size = 1024;
};

struct DataSplits {
  std::shared_ptr<const data::Dataset> train, test;
  data::TransformPtr train_transforms, test_transforms;
  int64_t num_classes = 0;
};

// Throws naming the data set when the name is unknown or its files cannot be read.
DataSplits make_data(const DataConfig& cfg);

}  // namespace frugal::train
