// Fashion-MNIST (Zalando): 28x28 grey images of 10 clothing classes, 60000 train / 10000 test,
// read from the four IDX files. Pixels are scaled to [0, 1]; one channel.
//
//   data::FashionMnist train(data::default_fashion_mnist_dir(), /*train=*/true);
//   data::FashionMnist quick(dir, true, /*limit=*/512);   // the first 512 samples only
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace frugal::data {

// $FRUGAL_FASHION_MNIST_DIR when set, else /usr/share/datasets/fashion-mnist (Debian's
// dataset-fashion-mnist package).
std::string default_fashion_mnist_dir();

class FashionMnist : public Dataset {
 public:
  static constexpr int64_t kClasses = 10;
  // Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from dir (or the same names without
  // .gz when only those exist). limit >= 0 keeps the first `limit` samples.
  FashionMnist(std::string dir = default_fashion_mnist_dir(), bool train = true,
               int64_t limit = -1);

  int64_t size() const override { return count_; }
  Shape sample_shape() const override { return {rows_, cols_, 1}; }
  int64_t num_classes() const override { return kClasses; }
  void get(int64_t i, float* image, int64_t* label) const override;

  const std::vector<uint8_t>& raw_pixels() const { return pixels_; }  // [N, 28, 28]
  const std::vector<uint8_t>& raw_labels() const { return labels_; }  // [N]

 private:
  int64_t count_ = 0;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
};

}  // namespace frugal::data
