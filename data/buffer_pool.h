// Equal-size host buffers recycled between batches, so a DataLoader's host memory stays flat
// across epochs. A buffer goes back to its pool when its PooledBuffer (or the Tensor wrapping it)
// dies; the pool outlives the loader while any of them lives.
//
//   auto pool = data::BufferPool::create(memory::pinned_host_allocator(), bytes, /*keep=*/4);
//   data::PooledBuffer b = pool->acquire();         // reused when one is free, else allocated
//   Tensor t = data::wrap_pooled(std::move(b), {n, h, w, c}, DType::f32);  // returns on death
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tensor.h"
#include "memory/allocator.h"

namespace frugal::data {

class BufferPool;

// One buffer on loan from a pool (move-only).
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(memory::DataPtr data, std::shared_ptr<BufferPool> pool)
      : data_(std::move(data)), pool_(std::move(pool)) {}
  PooledBuffer(PooledBuffer&&) noexcept = default;
  PooledBuffer& operator=(PooledBuffer&& o) noexcept;
  ~PooledBuffer();

  void* get() const { return data_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_.get());
  }
  bool empty() const { return data_.get() == nullptr && data_.size() == 0; }

 private:
  friend Tensor wrap_pooled(PooledBuffer buffer, const Shape& shape, DType dtype);
  memory::DataPtr data_;
  std::shared_ptr<BufferPool> pool_;
};

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // `keep` buffers are allocated now and kept for reuse; more are allocated when all are on loan
  // and freed on return, so a consumer that hoards batches costs memory only while it does.
  static std::shared_ptr<BufferPool> create(memory::Allocator& allocator, size_t bytes,
                                            int64_t keep);
  PooledBuffer acquire();
  size_t buffer_bytes() const { return bytes_; }
  int64_t free_count() const;

  // Returns a buffer (from PooledBuffer or a wrapped tensor's storage). Never throws.
  void give_back(memory::DataPtr data) noexcept;

 private:
  BufferPool(memory::Allocator& allocator, size_t bytes, int64_t keep);
  memory::Allocator& allocator_;
  size_t bytes_;
  size_t keep_;
  mutable std::mutex mu_;
  std::vector<memory::DataPtr> free_;  // capacity keep_, reserved up front
};

// A CPU tensor over the buffer's bytes ([shape] of dtype, which must fit). The buffer returns to
// its pool when the last handle to the tensor's storage dies.
Tensor wrap_pooled(PooledBuffer buffer, const Shape& shape, DType dtype);

}  // namespace frugal::data
