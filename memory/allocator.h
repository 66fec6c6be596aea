// The allocator interface every device byte goes through, and its statistics.
//
// Policy: an Allocator hands out DataPtr owners (move-only, free on destruction). Statistics use
// PyTorch's names so that users can compare numbers one to one:
//   allocated  bytes handed out to live DataPtrs (after rounding)
//   requested  bytes callers asked for (before rounding)
//   reserved   bytes obtained from the system (cached segments included)
//   active     allocated blocks plus blocks freed but still in use by a stream (== allocated here)
//   inactive_split  free bytes inside partly used segments (fragmentation)
//
//   memory::DataPtr p = memory::cpu_allocator().allocate(1024);
//   memory::MemoryStats s = memory::cpu_allocator().stats();  // s.allocated.current == 1024
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "base/device.h"
#include "memory/events.h"

namespace frugal::memory {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // total ever added
  int64_t freed = 0;      // total ever removed

  void add(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void sub(int64_t n) {
    current -= n;
    freed += n;
  }
  void reset_peak() { peak = current; }
};

struct MemoryStats {
  Stat allocated_bytes;
  Stat requested_bytes;
  Stat reserved_bytes;
  Stat active_bytes;
  Stat inactive_split_bytes;
  Stat allocation;  // count of live allocations
  Stat segment;     // count of live segments obtained from the system
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;

  // Every statistic's peak back to its current value (reset_peak_stats).
  void reset_peaks() {
    for (Stat* s : {&allocated_bytes, &requested_bytes, &reserved_bytes, &active_bytes,
                    &inactive_split_bytes, &allocation, &segment}) {
      s->reset_peak();
    }
  }

  // A table of every statistic (current, peak, total allocated, total freed) in
  // torch.cuda.memory_summary's layout, under `title`; used in OOM messages and by
  // memory::summary(Device) (memory/views.h).
  std::string summary(const std::string& title = "memory summary") const;
};

class Allocator;

// Owner of one allocation. Move-only; returns the memory to its allocator when destroyed.
class DataPtr {
 public:
  DataPtr() = default;
  // Reports the allocation to the observers, if any (Note [Allocation events]). `counted`: the
  // bytes the owner's allocated statistic grew by for it (its block, after rounding), so that
  // observers following allocated bytes add what the allocator adds; the 3-argument form is for
  // allocators that count the size asked for.
  DataPtr(void* ptr, size_t size, Allocator* owner, size_t counted);
  DataPtr(void* ptr, size_t size, Allocator* owner) : DataPtr(ptr, size, owner, size) {}
  // Part of memory another DataPtr holds, whose allocation observers saw (Note [Flat resident
  // tensors] in core/flat_tensors.h): its owner hears of the release, observers do not.
  struct Unobserved {};
  DataPtr(void* ptr, size_t size, Allocator* owner, Unobserved)
      : ptr_(ptr), size_(size), counted_(size), owner_(owner), observed_(false) {}
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  DataPtr(DataPtr&& o) noexcept { swap(o); }
  DataPtr& operator=(DataPtr&& o) noexcept {
    DataPtr tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~DataPtr() { reset(); }

  void* get() const { return ptr_; }
  size_t size() const { return size_; }
  size_t counted() const { return counted_; }  // the owner's allocated bytes for it
  Allocator* owner() const { return owner_; }
  // The tags it was allocated under; null when nobody observed its allocation.
  const AllocationTag* tag() const { return tag_; }
  uint64_t event_id() const { return event_id_; }
  void reset();

 private:
  void swap(DataPtr& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    std::swap(counted_, o.counted_);
    std::swap(owner_, o.owner_);
    std::swap(tag_, o.tag_);
    std::swap(event_id_, o.event_id_);
    std::swap(observed_, o.observed_);
  }
  void* ptr_ = nullptr;
  size_t size_ = 0;
  size_t counted_ = 0;
  Allocator* owner_ = nullptr;
  const AllocationTag* tag_ = nullptr;  // interned (Note [Allocation events]); null: unobserved
  uint64_t event_id_ = 0;               // names it in events; 0 when nobody observed its allocation
  bool observed_ = true;                // false: a part of an observed allocation, see Unobserved
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` (nothing for 0 bytes). Throws OutOfMemoryError when it cannot.
  virtual DataPtr allocate(size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak_stats() = 0;
  // Returns cached, unused memory to the system and the bytes given back (reserved drops by as
  // much); 0 for allocators that cache nothing.
  virtual int64_t empty_cache() { return 0; }
  virtual Device device() const = 0;
  // Refuse (OutOfMemoryError) allocations that would take reserved bytes over `bytes`; 0 means
  // no cap. The CPU and CUDA allocators have one; others refuse to be capped.
  virtual void set_memory_cap_bytes(size_t bytes);
  virtual size_t memory_cap_bytes() const { return 0; }

 protected:
  friend class DataPtr;
  virtual void release(void* ptr, size_t size) noexcept = 0;
};

inline DataPtr::DataPtr(void* ptr, size_t size, Allocator* owner, size_t counted)
    : ptr_(ptr), size_(size), counted_(counted), owner_(owner) {
  if (owner_ != nullptr && size_ != 0 && observing()) {
    tag_ = current_tag();
    event_id_ = next_event_id();
    notify_allocation({EventKind::alloc, owner_->device(), size_, event_id_, tag_,
                       reinterpret_cast<uintptr_t>(ptr_), counted_});
  }
}

inline void DataPtr::reset() {
  if (owner_ != nullptr && (ptr_ != nullptr || size_ != 0)) {
    if (observed_ && observing()) {
      notify_allocation({EventKind::free, owner_->device(), size_, event_id_,
                         tag_ != nullptr ? tag_ : untagged(), reinterpret_cast<uintptr_t>(ptr_),
                         counted_});
    }
    owner_->release(ptr_, size_);
  }
  ptr_ = nullptr;
  size_ = 0;
  counted_ = 0;
  owner_ = nullptr;
  tag_ = nullptr;
  event_id_ = 0;
  observed_ = true;
}

// Host memory, 64-byte aligned, counted. Thread-safe.
Allocator& cpu_allocator();
// Counts bytes and hands out null pointers: tensors on the meta device have shapes, no data.
Allocator& meta_allocator();
// The allocator of `device`. CUDA allocators are registered by the CUDA backend when it is built.
Allocator& allocator_for(Device device);
void register_device_allocator(Device device, Allocator* allocator);

}  // namespace frugal::memory
