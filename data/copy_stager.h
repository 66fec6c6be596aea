// The DataLoader's one-batch-ahead device staging on CUDA: a batch's host-to-device copy is
// issued on the device's copy stream one next() early, so that it overlaps the step the consumer
// runs on the batch before it; events order it with the compute stream both ways.
// See Note [Loader host copies] in data/loader.h. Used by one (consumer) thread only.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <utility>

#include "core/tensor.h"
#include "data/buffer_pool.h"
#include "data/copy_event.h"

namespace frugal::data {

// A batch's device tensors, images [N, H, W, C] f32 and labels [N] i64, uninitialised; the
// images in a segment of their own size (data/copy_stager.cpp says why).
std::pair<Tensor, Tensor> empty_device_batch(const Shape& image_shape, Device device);

class CopyStager {
 public:
  explicit CopyStager(Device device) : device_(device) {}
  CopyStager(const CopyStager&) = delete;
  CopyStager& operator=(const CopyStager&) = delete;
  ~CopyStager();  // drain(), reporting (not throwing) a failed device

  // Issues the copy of batch `index` (`images` [N, H, W, C] f32 and `labels` [N] i64 in pinned
  // buffers) into fresh device tensors on the copy stream. Nothing may be staged already.
  void stage(int64_t index, uint64_t generation, PooledBuffer images, PooledBuffer labels,
             const Shape& image_shape);
  // Stages a batch that failed to build: take() rethrows `error`.
  void stage_error(int64_t index, uint64_t generation, std::exception_ptr error);

  bool staged() const { return staged_ >= 0; }
  int64_t staged_index() const { return slots_[static_cast<size_t>(staged_)].index; }
  uint64_t staged_generation() const { return slots_[static_cast<size_t>(staged_)].generation; }
  std::exception_ptr staged_error() const { return slots_[static_cast<size_t>(staged_)].error; }

  // Hands the staged batch over: the compute stream waits for its copy (the host does not), and
  // its pinned buffers stay on loan until that copy has finished. Rethrows a staged error.
  struct Taken {
    Tensor images, labels;
    int64_t index = 0;
  };
  Taken take();
  // Forgets the staged batch (a restarted epoch): its device blocks are freed only after the
  // compute stream was made to wait for the copy into them, so the caching allocator never hands
  // them out while the copy stream still writes them.
  void drop();
  // drop(), then blocks until every copy has finished and returns all pinned buffers.
  void drain();

 private:
  struct Slot {
    PooledBuffer host_images, host_labels;  // the copy's sources, on loan until `copied`
    CopyEvent copied;                       // recorded on the copy stream after the copy
    Tensor images, labels;                  // the device batch while staged
    int64_t index = 0;
    uint64_t generation = 0;
    std::exception_ptr error;
  };
  // Waits for the slot's last copy and returns its pinned buffers.
  static void recycle(Slot& s);

  Device device_;
  std::array<Slot, 2> slots_;  // the staged batch and the one handed over before it
  int staged_ = -1;            // index into slots_, -1 when nothing is staged
  int next_ = 0;               // the slot the next stage() fills
  CopyEvent fence_;            // compute stream -> copy stream, see the Note
};

}  // namespace frugal::data
