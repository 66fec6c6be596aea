// Data set construction by name, with the standard transform pipelines.
#include "train/datasets.h"

#include "base/error.h"
#include "data/fashion_mnist.h"
#include "data/synthetic.h"

namespace frugal::train {
namespace {

// Fashion-MNIST's pixel statistics over the training set (scaled to [0, 1]).
constexpr float kFashionMean = 0.2860f;
constexpr float kFashionStd = 0.3530f;

}  // namespace

DataSplits make_data(const DataConfig& cfg) {
  DataSplits out;
  if (cfg.name == "fashion-mnist") {
    std::string dir = cfg.dir.empty() ? data::default_fashion_mnist_dir() : cfg.dir;
    if (cfg.need_train) out.train = std::make_shared<data::FashionMnist>(dir, true, cfg.limit);
    out.test = std::make_shared<data::FashionMnist>(dir, false, cfg.test_limit);
    out.num_classes = data::FashionMnist::kClasses;
    // Crop and resize follow the files' image size, which need not be Fashion-MNIST's 28x28.
    auto common_for = [&](const data::Dataset& split) {
      const Shape s = split.sample_shape();  // [H, W, 1]
      std::vector<data::TransformPtr> t;
      if (s[0] != cfg.image_size || s[1] != cfg.image_size) {
        t.push_back(data::make_resize(cfg.image_size, cfg.image_size));
      }
      t.push_back(data::make_normalize({kFashionMean}, {kFashionStd}));
      if (cfg.channels != 1) t.push_back(data::make_repeat_channels(cfg.channels));
      return t;
    };
    if (out.train) {  // eval reads the test files alone (need_train false)
      std::vector<data::TransformPtr> train = common_for(*out.train);
      if (cfg.augment) {
        const Shape s = out.train->sample_shape();
        train.insert(train.begin(), data::make_random_horizontal_flip(0.5f));
        train.insert(train.begin(), data::make_random_crop(s[0], s[1], 2));
      }
      out.train_transforms = std::make_shared<data::Compose>(train);
    }
    out.test_transforms = std::make_shared<data::Compose>(common_for(*out.test));
    return out;
  }
  if (cfg.name == "synthetic") {
    Shape shape{cfg.image_size, cfg.image_size, cfg.channels};
    // The limits size a synthetic set, as they cut Fashion-MNIST (a soak picks its steps so).
    const int64_t train_size = cfg.limit > 0 ? cfg.limit : cfg.synthetic_size;
    const int64_t test_size =
        cfg.test_limit > 0 ? cfg.test_limit : std::max<int64_t>(cfg.synthetic_size / 4, 1);
    if (cfg.need_train) {
      out.train =
          std::make_shared<data::SyntheticDataset>(shape, cfg.synthetic_classes, train_size, 1);
    }
    // The same task as the train split (seed 1: the same class means), other samples: a test
    // set from another seed has other means, and accuracy on it stays at chance.
    out.test =
        std::make_shared<data::SyntheticDataset>(shape, cfg.synthetic_classes, test_size, 1,
                                                 data::SyntheticOptions{.split = data::kTestSplit});
    out.num_classes = cfg.synthetic_classes;
    return out;
  }
  FRUGAL_FAIL("unknown data set '", cfg.name, "' (expected fashion-mnist or synthetic)");
}

}  // namespace frugal::train
