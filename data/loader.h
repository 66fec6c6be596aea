// DataLoader: batches of a Dataset, shuffled per epoch from (seed, epoch), assembled NHWC by
// worker threads into recycled host buffers (pinned when the device is CUDA) and handed over in
// order through a bounded queue. The order and content of every batch depend only on the seed,
// the epoch and the options, never on num_workers or timing.
//
//   data::DataLoader loader(ds, {.batch_size = 128, .shuffle = true, .num_workers = 2,
//                                .seed = 1, .device = Device::cuda()});
//   for (int64_t e = 0; e < epochs; ++e)
//     for (data::Batch& b : loader.epoch(e)) step(b.images /*[N, H, W, C]*/, b.labels /*[N]*/);
//
// Note [Loader host copies]: on CUDA each batch is copied from its pinned buffer to fresh device
// tensors with kernels::copy_bytes on the device's compute stream (stream-ordered with the
// step, so the caching allocator's reuse rules hold); a CUDA event after the copy tells when the
// pinned buffer may return to the pool, which the next next() call waits for (cheap: the copy is
// queued ahead of the step that follows it). No dedicated copy stream: its overlap would need
// device buffers owned outside the caching allocator.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace frugal::data {

struct LoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  bool drop_last = false;
  int num_workers = 0;  // threads; 0 loads in the calling thread inside next()
  int prefetch = 2;     // batches built ahead of the consumer (queue depth), >= 1
  uint64_t seed = 0;
  TransformPtr transforms = nullptr;  // per-sample, may be null
  Device device = Device::cpu();
};

struct Batch {
  Tensor images;      // [N, H, W, C] f32 on the loader's device
  Tensor labels;      // [N] i64
  int64_t index = 0;  // batch number within the epoch
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~DataLoader();  // stops and joins the workers, mid-epoch or not
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts (or restarts) epoch `epoch`; batches of an unfinished epoch are dropped.
  void begin_epoch(int64_t epoch);
  // The next batch of the current epoch, nullopt after the last. Rethrows a worker's exception
  // (a dataset or transform error) at the batch it happened in; that ends the epoch.
  std::optional<Batch> next();
  int64_t batches_per_epoch() const;
  Shape sample_shape() const;  // [H, W, C] after the transforms
  // Dataset indices in the order epoch `epoch` visits them (before drop_last).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // Range-for over one epoch: begin() calls begin_epoch(epoch).
  class EpochRange;
  EpochRange epoch(int64_t epoch);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

class DataLoader::EpochRange {
 public:
  class iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(DataLoader* loader) : loader_(loader) { ++*this; }
    Batch& operator*() const { return *current_; }
    Batch* operator->() const { return &*current_; }
    iterator& operator++() {
      current_.reset();  // return the buffers before asking for the next batch
      current_ = loader_->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    DataLoader* loader_ = nullptr;
    mutable std::optional<Batch> current_;
  };

  EpochRange(DataLoader* loader, int64_t epoch) : loader_(loader), epoch_(epoch) {}
  iterator begin() {
    loader_->begin_epoch(epoch_);
    return iterator(loader_);
  }
  std::default_sentinel_t end() const { return {}; }

 private:
  DataLoader* loader_;
  int64_t epoch_;
};

inline DataLoader::EpochRange DataLoader::epoch(int64_t epoch) { return EpochRange(this, epoch); }

}  // namespace frugal::data
