// train::make_data: --limit and --test-limit size the synthetic sets as they cut Fashion-MNIST.
#include "train/datasets.h"

#include <gtest/gtest.h>

#include <vector>

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

// The test split is the train split's task with other samples: class averages learnt from the
// train split classify it (nearest average), and no test image repeats a train image. A test
// split with its own class means left this at chance, whatever the model learnt.
TEST(Datasets, TheSyntheticTestSplitIsTheTrainSplitsTask) {
  train::DataConfig c{.name = "synthetic", .image_size = 8, .limit = 400, .test_limit = 100};
  train::DataSplits d = train::make_data(c);
  const int64_t n = d.train->sample_shape().numel(), classes = d.num_classes;
  std::vector<double> sum(static_cast<size_t>(classes * n), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(classes), 0);
  std::vector<float> image(static_cast<size_t>(n));
  std::vector<std::vector<float>> train_images;
  int64_t label = 0;
  for (int64_t i = 0; i < d.train->size(); ++i) {
    d.train->get(i, image.data(), &label);
    train_images.push_back(image);
    count[static_cast<size_t>(label)]++;
    for (int64_t j = 0; j < n; ++j) sum[static_cast<size_t>(label * n + j)] += image[j];
  }
  int64_t right = 0;
  for (int64_t i = 0; i < d.test->size(); ++i) {
    d.test->get(i, image.data(), &label);
    for (const auto& t : train_images) ASSERT_NE(t, image) << "test sample " << i;
    int64_t best = -1;
    double best_dist = 0;
    for (int64_t k = 0; k < classes; ++k) {
      if (count[static_cast<size_t>(k)] == 0) continue;
      double dist = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double avg = sum[static_cast<size_t>(k * n + j)] / count[static_cast<size_t>(k)];
        dist += (image[j] - avg) * (image[j] - avg);
      }
      if (best < 0 || dist < best_dist) best = k, best_dist = dist;
    }
    right += best == label;
  }
  EXPECT_GE(right, 95) << "of " << d.test->size();
}
