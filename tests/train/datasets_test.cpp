// train::make_data: --limit and --test-limit size the synthetic sets as they cut Fashion-MNIST.
#include "train/datasets.h"

#include <gtest/gtest.h>

using namespace frugal;

TEST(Datasets, LimitsSizeTheSyntheticSets) {
  train::DataConfig c{.name = "synthetic", .image_size = 16};
  train::DataSplits plain = train::make_data(c);
  EXPECT_EQ(plain.train->size(), c.synthetic_size);
  EXPECT_EQ(plain.test->size(), c.synthetic_size / 4);
  c.limit = 300;
  c.test_limit = 40;
  train::DataSplits limited = train::make_data(c);
  EXPECT_EQ(limited.train->size(), 300);
  EXPECT_EQ(limited.test->size(), 40);
  EXPECT_EQ(limited.train->sample_shape(), (Shape{16, 16, 1}));
}
