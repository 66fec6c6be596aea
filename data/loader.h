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
// Note [Loader host copies]: on CUDA the batches come from pinned host buffers. With
// `copy_stream` (the default) the copy of batch k+1 is issued by the next() that returns batch k,
// on the device's copy stream (kernels::cuda::copy_stream), so it runs while the step on batch k
// computes; data/copy_stager.h does it. (With workers, only when batch k+1 is built by then: next()
// never waits for it; otherwise the next() that returns it copies it, without overlap.) Its device
// tensors come from frugal's caching allocator, which is stream-aware only for the compute stream
// (a block freed on the host is reused at once, ordered only by the compute stream), so two
// cross-stream events make the copy safe:
//   - before the copy, an event recorded on the compute stream, which the copy stream waits for:
//     a freshly allocated block may have been freed by the host while kernels already queued on
//     the compute stream still read it. That event covers only the work queued so far (the steps
//     before batch k's), so the copy still overlaps batch k's step;
//   - after the copy, a "ready" event on the copy stream; handing batch k+1 over makes the compute
//     stream wait for it (no host sync). Every later use of the batch, and the reuse of its blocks
//     by the allocator once the consumer frees them, is thus ordered after the copy on the compute
//     stream, as if the copy had run there. A staged batch that is never handed over (begin_epoch,
//     destruction) is freed only after the compute stream was made to wait the same way.
// A batch's pinned buffers return to their pool only after the ready event completed: the one
// handed over keeps them until the stage two batches later reuses its slot (a host wait on a copy
// issued two next() calls earlier, which bounds how far the host runs ahead of the device); the
// destructor waits for all. The price is one more batch of device memory: the staged one.
// With copy_stream off, each batch is copied inside its own next() on the compute stream
// (stream-ordered with the steps, no overlap), and a CopyEvent after the copy lets the next
// next() return the pinned buffers.
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
  // Data parallelism: this process is rank `rank` of `world_size` and visits its shard of each
  // epoch (Note [Sharding an epoch across ranks] in data/shuffle.h); batch_size is per rank.
  int64_t rank = 0;
  int64_t world_size = 1;
  TransformPtr transforms = nullptr;  // per-sample, may be null
  Device device = Device::cpu();
  // CUDA only: copy each batch on the device's copy stream one batch ahead, overlapping the
  // consumer's compute (true), or on the compute stream inside next() (false). Same batches.
  bool copy_stream = true;
};

// Device bytes a loader with `o` holds beside the batch it handed over: with copy_stream on a
// CUDA device, the staged next batch of `sample_shape` images (f32) and labels (i64), each as the
// device allocator rounds it; 0 otherwise. What a memory prediction of the step leaves room for.
int64_t staged_device_bytes(const LoaderOptions& o, const Shape& sample_shape);

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
  // This rank's samples of an epoch that are not padding, which come first (Note [Sharding an
  // epoch across ranks] in data/shuffle.h): all of them with one rank.
  int64_t unpadded_samples() const;
  Shape sample_shape() const;  // [H, W, C] after the transforms
  // Dataset indices in the order epoch `epoch` visits them: this rank's shard when world_size > 1
  // (before drop_last).
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
