// Synthetic samples from kernels/random.h's counter-based uniform01: three independent streams
// (labels, class means, noise) derived from the seed, indexed by sample and element.
#include "data/synthetic.h"

#include "base/error.h"
#include "kernels/random.h"

namespace frugal::data {
namespace {
// Stream keys: distinct constants so the three draws never share (seed, index) pairs.
constexpr uint64_t kLabelStream = 0x6c6162656c73ull;
constexpr uint64_t kMeanStream = 0x6d65616e73ull;
constexpr uint64_t kNoiseStream = 0x6e6f697365ull;

uint64_t stream_seed(uint64_t seed, uint64_t stream) { return kernels::mix64(seed ^ stream); }

// The label and noise streams of a split; split 0 keeps the train split's streams as they were.
uint64_t split_stream(uint64_t stream, uint64_t split) {
  return split == 0 ? stream : stream ^ kernels::mix64(split);
}
}  // namespace

SyntheticDataset::SyntheticDataset(Shape sample_shape, int64_t num_classes, int64_t size,
                                   uint64_t seed, SyntheticOptions opts)
    : shape_(std::move(sample_shape)),
      classes_(num_classes),
      size_(size),
      seed_(seed),
      opts_(opts) {
  FRUGAL_CHECK(shape_.ndim() == 3 && shape_.numel() > 0,
               "SyntheticDataset: sample shape must be a non-empty [H, W, C], got ", shape_);
  FRUGAL_CHECK(classes_ >= 1, "SyntheticDataset: need at least one class, got ", classes_);
  FRUGAL_CHECK(size_ >= 0, "SyntheticDataset: negative size ", size_);
}

int64_t SyntheticDataset::label_of(int64_t i) const {
  float u = kernels::uniform01(stream_seed(seed_, split_stream(kLabelStream, opts_.split)),
                               static_cast<uint64_t>(i));
  int64_t c = static_cast<int64_t>(u * static_cast<float>(classes_));
  return c < classes_ ? c : classes_ - 1;
}

float SyntheticDataset::class_mean(int64_t c, int64_t j) const {
  return kernels::uniform01(stream_seed(seed_, kMeanStream),
                            static_cast<uint64_t>(c * shape_.numel() + j));
}

void SyntheticDataset::get(int64_t i, float* image, int64_t* label) const {
  FRUGAL_CHECK(i >= 0 && i < size_, "SyntheticDataset::get: index ", i, " out of range [0, ", size_,
               ")");
  const int64_t n = shape_.numel();
  const int64_t c = label_of(i);
  const uint64_t noise_seed = stream_seed(seed_, split_stream(kNoiseStream, opts_.split));
  for (int64_t j = 0; j < n; ++j) {
    float u = kernels::uniform01(noise_seed, static_cast<uint64_t>(i * n + j));
    image[j] = class_mean(c, j) + opts_.noise * (u - 0.5f);
  }
  *label = c;
}

}  // namespace frugal::data
