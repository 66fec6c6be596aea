// Fashion-MNIST from its IDX files: both files are checked against each other, and labels
// against the 10 classes, once at load so that get() is a plain scale-and-copy.
#include "data/fashion_mnist.h"

#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "data/idx.h"

namespace frugal::data {
namespace {

// "<dir>/<name>.gz", or "<dir>/<name>" when only the uncompressed file exists.
std::string pick(const std::string& dir, const std::string& name) {
  std::string gz = dir + "/" + name + ".gz";
  std::string raw = dir + "/" + name;
  if (!std::filesystem::exists(gz) && std::filesystem::exists(raw)) return raw;
  return gz;
}

}  // namespace

std::string default_fashion_mnist_dir() {
  const char* env = std::getenv("FRUGAL_FASHION_MNIST_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  return "/usr/share/datasets/fashion-mnist";
}

FashionMnist::FashionMnist(std::string dir, bool train, int64_t limit) {
  const std::string prefix = train ? "train" : "t10k";
  IdxImages images = read_idx_images(pick(dir, prefix + "-images-idx3-ubyte"));
  IdxLabels labels = read_idx_labels(pick(dir, prefix + "-labels-idx1-ubyte"));
  check_same_count(images, labels);
  // Said here, naming the file: further on an empty set surfaces as a batch size too large for it.
  if (images.count == 0) {
    FRUGAL_FAIL(images.path, ": 0 images (count at byte 4); a data set needs at least one");
  }
  for (size_t i = 0; i < labels.labels.size(); ++i) {
    if (labels.labels[i] >= kClasses) {
      FRUGAL_FAIL(labels.path, ": label ", int(labels.labels[i]), " at byte ", 8 + i,
                  " is not a class in [0, ", kClasses, ")");
    }
  }
  count_ = limit >= 0 && limit < images.count ? limit : images.count;
  rows_ = images.rows;
  cols_ = images.cols;
  pixels_ = std::move(images.pixels);
  labels_ = std::move(labels.labels);
  pixels_.resize(static_cast<size_t>(count_ * rows_ * cols_));
  pixels_.shrink_to_fit();
  labels_.resize(static_cast<size_t>(count_));
  labels_.shrink_to_fit();
}

void FashionMnist::get(int64_t i, float* image, int64_t* label) const {
  FRUGAL_CHECK(i >= 0 && i < count_, "FashionMnist::get: index ", i, " out of range [0, ", count_,
               ")");
  const int64_t n = rows_ * cols_;
  const uint8_t* src = pixels_.data() + i * n;
  for (int64_t j = 0; j < n; ++j) image[j] = static_cast<float>(src[j]) * (1.0f / 255.0f);
  *label = labels_[static_cast<size_t>(i)];
}

}  // namespace frugal::data
