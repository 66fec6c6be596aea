// The host buffer pool behind DataLoader batches.
#include "data/buffer_pool.h"

#include "base/error.h"

namespace frugal::data {

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& o) noexcept {
  if (this != &o) {
    if (pool_ && !empty()) pool_->give_back(std::move(data_));
    data_ = std::move(o.data_);
    pool_ = std::move(o.pool_);
  }
  return *this;
}

PooledBuffer::~PooledBuffer() {
  if (pool_ && !empty()) pool_->give_back(std::move(data_));
}

BufferPool::BufferPool(memory::Allocator& allocator, size_t bytes, int64_t keep)
    : allocator_(allocator), bytes_(bytes), keep_(static_cast<size_t>(keep)) {
  FRUGAL_CHECK(keep >= 0, "BufferPool: negative keep ", keep);
  free_.reserve(keep_);
  for (size_t i = 0; i < keep_; ++i) free_.push_back(allocator_.allocate(bytes_));
}

std::shared_ptr<BufferPool> BufferPool::create(memory::Allocator& allocator, size_t bytes,
                                               int64_t keep) {
  return std::shared_ptr<BufferPool>(new BufferPool(allocator, bytes, keep));
}

PooledBuffer BufferPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      memory::DataPtr d = std::move(free_.back());
      free_.pop_back();
      return PooledBuffer(std::move(d), shared_from_this());
    }
  }
  return PooledBuffer(allocator_.allocate(bytes_), shared_from_this());
}

int64_t BufferPool::free_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_.size());
}

void BufferPool::give_back(memory::DataPtr data) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  // push_back cannot allocate below the reserved capacity; beyond it the buffer is freed.
  if (free_.size() < keep_) free_.push_back(std::move(data));
}

Tensor wrap_pooled(PooledBuffer buffer, const Shape& shape, DType dtype) {
  size_t nbytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  FRUGAL_CHECK(buffer.pool_ != nullptr && nbytes <= buffer.pool_->buffer_bytes(),
               "wrap_pooled: ", shape, " ", dtype, " does not fit a pooled buffer");
  std::shared_ptr<BufferPool> pool = buffer.pool_;
  auto storage = std::shared_ptr<Storage>(
      new Storage{std::move(buffer.data_), Device::cpu(), nbytes}, [pool](Storage* s) {
        if (s->data.get() != nullptr || s->data.size() != 0) pool->give_back(std::move(s->data));
        delete s;
      });
  buffer.pool_.reset();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace frugal::data
