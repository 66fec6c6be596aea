// One allocation shared by tensors that live for the whole run (Note [Flat resident tensors]).
#include "core/flat_tensors.h"

#include <atomic>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "memory/events.h"
#include "memory/rounding.h"

namespace frugal {

namespace {

// Owns the allocation and hands its parts to the tensors' storages; the part released last
// takes the allocation, and this owner, with it.
class FlatBlock final : public memory::Allocator {
 public:
  FlatBlock(memory::DataPtr block, Device device, int parts)
      : block_(std::move(block)), device_(device), live_(parts) {}

  memory::DataPtr part(size_t offset, size_t bytes) {
    char* base = static_cast<char*>(block_.get());  // null on meta: parts are null too
    return memory::DataPtr(base != nullptr ? base + offset : nullptr, bytes, this,
                           memory::DataPtr::Unobserved{});
  }

  memory::DataPtr allocate(size_t bytes) override {
    FRUGAL_FAIL("empty_flat: the block on ", device_, " hands out its parts only, not ", bytes,
                " more bytes");
  }
  memory::MemoryStats stats() const override { return {}; }  // counted by the block's allocator
  void reset_peak_stats() override {}
  Device device() const override { return device_; }

 protected:
  void release(void*, size_t) noexcept override {
    if (live_.fetch_sub(1) == 1) delete this;
  }

 private:
  memory::DataPtr block_;
  Device device_;
  std::atomic<int> live_;
};

}  // namespace

std::vector<Tensor> empty_flat(const std::vector<FlatSpec>& specs) {
  if (specs.empty()) return {};
  const Device device = specs.front().second.device;
  std::vector<size_t> offsets(specs.size()), bytes(specs.size());
  size_t total = 0;
  int parts = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [shape, opts] = specs[i];
    FRUGAL_CHECK(opts.device == device, "empty_flat: tensor ", i, " is on ", opts.device,
                 ", tensor 0 on ", device, "; one allocation serves one device");
    bytes[i] = checked_nbytes(shape, dtype_size(opts.dtype), "empty_flat");
    offsets[i] = total;
    total += bytes[i] == 0 ? 0 : memory::round_request(bytes[i]);
    parts += bytes[i] != 0;
  }
  FlatBlock* block = nullptr;
  if (parts > 0) {
    // May throw (out of memory): nothing has been made yet.
    memory::ResidentBlockScope resident;  // a segment of its own size, nothing around it
    memory::DataPtr data = memory::allocator_for(device).allocate(total);
    block = new FlatBlock(std::move(data), device, parts);
  }
  std::vector<Tensor> out;
  out.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [shape, opts] = specs[i];
    out.push_back(Tensor::over(
        shape, opts, bytes[i] != 0 ? block->part(offsets[i], bytes[i]) : memory::DataPtr()));
  }
  return out;
}

std::vector<Tensor> zeros_flat(const std::vector<FlatSpec>& specs) {
  std::vector<Tensor> out = empty_flat(specs);
  autograd::NoGradGuard no_grad;  // parameters among them are made, not changed
  for (const Tensor& t : out) fill_(t, 0.0);
  return out;
}

}  // namespace frugal
