// make_data on Fashion-MNIST-format files whose images are not 28x28: the crop and the resize
// follow the files' image size instead of failing with a message that names no file.
#include <gtest/gtest.h>

#include "data/data_test_util.h"
#include "data/transforms.h"
#include "train/datasets.h"

using namespace frugal;
using namespace frugal::data::testing;

TEST(FashionMnistData, ImagesOfAnotherSizeAreCroppedAndResized) {
  TempDir dir;
  const uint32_t n = 3, side = 20;
  for (const char* split : {"train", "t10k"}) {
    const std::string prefix = dir.file(split);
    write_file(prefix + "-images-idx3-ubyte.gz",
               gzip(idx_images_bytes(n, side, side, pattern_bytes(n * side * side, 1))));
    write_file(prefix + "-labels-idx1-ubyte.gz", gzip(idx_labels_bytes(n, {0, 1, 2})));
  }
  train::DataSplits d = train::make_data({.dir = dir.path(), .image_size = 32, .augment = true});
  ASSERT_EQ(d.train->sample_shape(), (Shape{20, 20, 1}));
  EXPECT_EQ(d.train_transforms->output_shape(d.train->sample_shape()), (Shape{32, 32, 1}));
  EXPECT_EQ(d.test_transforms->output_shape(d.test->sample_shape()), (Shape{32, 32, 1}));
  // At their own size they are not resized at all.
  train::DataSplits same = train::make_data({.dir = dir.path(), .image_size = 20});
  EXPECT_EQ(same.train_transforms->output_shape(same.train->sample_shape()), (Shape{20, 20, 1}));
}
