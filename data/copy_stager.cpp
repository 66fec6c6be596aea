// CopyStager: two slots alternate, one staged (its copy possibly running on the copy stream) and
// one handed over (its pinned buffers kept until its copy has finished). The event protocol is
// Note [Loader host copies] in data/loader.h.
#include "data/copy_stager.h"

#include <cstdio>

#include "base/error.h"
#include "kernels/elementwise.h"
#include "memory/events.h"

namespace frugal::data {

std::pair<Tensor, Tensor> empty_device_batch(const Shape& image_shape, Device device) {
  // Every batch but an epoch's short last one has the same size and lives across a step
  // boundary; a segment of its own size holds each in turn as the one before is freed, where a
  // 20 MiB segment would keep its rest cached around it (17 MiB beside a 3 MiB batch of 256
  // 32x32 images).
  memory::ResidentBlockScope own_segment;
  return {Tensor::empty(image_shape, {DType::f32, device}),        // [N, H, W, C]
          Tensor::empty({image_shape[0]}, {DType::i64, device})};  // [N]
}

CopyStager::~CopyStager() {
  try {
    drain();
  } catch (const std::exception& e) {
    // A failed device cannot be helped here; each slot's CopyEvent still synchronises in its
    // destructor, which runs before the slot's pinned buffers return to their pool.
    std::fprintf(stderr, "frugal: DataLoader copy stream: %s\n", e.what());
  }
}

void CopyStager::recycle(Slot& s) {
  s.copied.wait();
  s.host_images = PooledBuffer();
  s.host_labels = PooledBuffer();
}

void CopyStager::stage(int64_t index, uint64_t generation, PooledBuffer images, PooledBuffer labels,
                       const Shape& image_shape) {
  FRUGAL_CHECK(staged_ < 0, "CopyStager::stage: batch ", staged_index(), " is still staged");
  Slot& s = slots_[static_cast<size_t>(next_)];
  recycle(s);  // its copy was issued two batches ago and is normally long finished
  auto [dev_images, dev_labels] = empty_device_batch(image_shape, device_);
  const kernels::Context compute = kernels::Context::of(device_);
  const kernels::Context copy = copy_context(device_);
  // The blocks just allocated may have been freed by the host while kernels queued on the compute
  // stream still use them; the copy waits for everything queued there so far (the steps before
  // the one about to be queued), so it cannot overwrite data a queued kernel still reads.
  fence_.record(compute);
  fence_.stream_wait(copy);
  s.host_images = std::move(images);
  s.host_labels = std::move(labels);
  kernels::copy_bytes(copy, device_, dev_images.data_ptr(), Device::cpu(), s.host_images.get(),
                      dev_images.nbytes());
  kernels::copy_bytes(copy, device_, dev_labels.data_ptr(), Device::cpu(), s.host_labels.get(),
                      dev_labels.nbytes());
  s.copied.record(copy);
  s.images = std::move(dev_images);
  s.labels = std::move(dev_labels);
  s.index = index;
  s.generation = generation;
  s.error = nullptr;
  staged_ = next_;
  next_ ^= 1;
}

void CopyStager::stage_error(int64_t index, uint64_t generation, std::exception_ptr error) {
  FRUGAL_CHECK(staged_ < 0, "CopyStager::stage_error: batch ", staged_index(), " is still staged");
  Slot& s = slots_[static_cast<size_t>(next_)];
  recycle(s);
  s.images = Tensor();
  s.labels = Tensor();
  s.index = index;
  s.generation = generation;
  s.error = std::move(error);
  staged_ = next_;
  next_ ^= 1;
}

CopyStager::Taken CopyStager::take() {
  FRUGAL_CHECK(staged_ >= 0, "CopyStager::take: nothing is staged");
  Slot& s = slots_[static_cast<size_t>(staged_)];
  staged_ = -1;
  if (s.error) {
    std::exception_ptr e = std::move(s.error);
    s.error = nullptr;
    std::rethrow_exception(e);
  }
  // From here on the consumer's kernels, and the caching allocator's reuse of these blocks once
  // the consumer frees them, are ordered after the copy on the compute stream.
  s.copied.stream_wait(kernels::Context::of(device_));
  Taken t{std::move(s.images), std::move(s.labels), s.index};
  s.images = Tensor();
  s.labels = Tensor();
  return t;
}

void CopyStager::drop() {
  if (staged_ < 0) return;
  Slot& s = slots_[static_cast<size_t>(staged_)];
  staged_ = -1;
  s.error = nullptr;
  if (s.images.defined()) s.copied.stream_wait(kernels::Context::of(device_));
  s.images = Tensor();
  s.labels = Tensor();
}

void CopyStager::drain() {
  drop();
  for (Slot& s : slots_) recycle(s);
}

}  // namespace frugal::data
