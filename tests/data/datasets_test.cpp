// Synthetic dataset determinism and learnability, and the real Fashion-MNIST files when present.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "base/error.h"
#include "data/fashion_mnist.h"
#include "data/synthetic.h"

using namespace frugal;
using namespace frugal::data;

TEST(Synthetic, DeterministicPerSeedAndIndex) {
  SyntheticDataset a(Shape{5, 3, 2}, 4, 50, 11), b(Shape{5, 3, 2}, 4, 50, 11);
  SyntheticDataset c(Shape{5, 3, 2}, 4, 50, 12);
  EXPECT_EQ(a.sample_shape(), (Shape{5, 3, 2}));
  std::vector<float> x(30), y(30), z(30);
  int64_t lx, ly, lz;
  int differ = 0;
  for (int64_t i : {0, 17, 49, 3}) {
    a.get(i, x.data(), &lx);
    b.get(i, y.data(), &ly);
    c.get(i, z.data(), &lz);
    EXPECT_EQ(x, y);
    EXPECT_EQ(lx, ly);
    differ += x != z;
  }
  EXPECT_EQ(differ, 4);
  // Reading in another order changes nothing (no hidden state).
  a.get(3, y.data(), &ly);
  a.get(17, x.data(), &lx);
  a.get(3, z.data(), &lz);
  EXPECT_EQ(y, z);
  EXPECT_THROW(a.get(50, x.data(), &lx), Error);
  EXPECT_THROW(a.get(-1, x.data(), &lx), Error);
}

TEST(Synthetic, LabelsCoverClassesAndSamplesSitNearTheirClassMean) {
  const int64_t classes = 5, n = 2000;
  SyntheticDataset ds(Shape{4, 4, 3}, classes, n, 3);
  const int64_t d = 48;
  std::vector<int64_t> counts(classes, 0);
  std::vector<float> x(d);
  int nearest_ok = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t label;
    ds.get(i, x.data(), &label);
    ASSERT_GE(label, 0);
    ASSERT_LT(label, classes);
    counts[label]++;
    // Values are class_mean + noise * (U - 0.5), noise 0.5.
    for (int64_t j = 0; j < d; ++j) {
      ASSERT_LE(std::abs(x[j] - ds.class_mean(label, j)), 0.25f + 1e-6f);
    }
    // The nearest class mean is the label's (what makes the labels learnable).
    double best = 1e30;
    int64_t arg = -1;
    for (int64_t c = 0; c < classes; ++c) {
      double s = 0;
      for (int64_t j = 0; j < d; ++j) s += std::pow(double(x[j]) - ds.class_mean(c, j), 2);
      if (s < best) best = s, arg = c;
    }
    nearest_ok += arg == label;
  }
  for (int64_t c = 0; c < classes; ++c) EXPECT_NEAR(counts[c], n / classes, 100) << c;
  EXPECT_EQ(nearest_ok, n);
}

TEST(FashionMnistReal, CountsAndKnownStatistics) {
  const std::string dir = default_fashion_mnist_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not found at " << dir;
  }
  FashionMnist train(dir, true), test(dir, false);
  ASSERT_EQ(train.size(), 60000);
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(train.sample_shape(), (Shape{28, 28, 1}));
  // Balanced classes: 6000 / 1000 of each; the first sample of both splits is an ankle boot (9).
  std::vector<int64_t> tr(10, 0), te(10, 0);
  for (uint8_t l : train.raw_labels()) tr[l]++;
  for (uint8_t l : test.raw_labels()) te[l]++;
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(tr[c], 6000);
    EXPECT_EQ(te[c], 1000);
  }
  EXPECT_EQ(train.raw_labels()[0], 9);
  EXPECT_EQ(test.raw_labels()[0], 9);
  // The well-known normalisation constant: mean pixel 0.2860 over the training set.
  double sum = 0;
  for (uint8_t p : train.raw_pixels()) sum += p;
  EXPECT_NEAR(sum / 255.0 / (60000.0 * 784.0), 0.2860, 5e-4);
  // get() agrees with the raw bytes.
  std::vector<float> img(784);
  int64_t label;
  train.get(12345, img.data(), &label);
  EXPECT_EQ(label, train.raw_labels()[12345]);
  for (int j = 0; j < 784; ++j) {
    ASSERT_FLOAT_EQ(img[j], train.raw_pixels()[12345 * 784 + j] / 255.0f);
  }
  FashionMnist quick(dir, true, 100);
  EXPECT_EQ(quick.size(), 100);
}
