// Out-of-memory errors on demand, for testing what happens after one: frugal's own recovery
// (train/oom_recovery.h) and a user's. While an InjectOom is alive, the `nth` allocation (from 0)
// on its device fails with OutOfMemoryError as a full device would, once; every other one is
// served. The allocators check it first, so a failed request changes no allocator state.
//
//   memory::InjectOom fail(Device::cpu(), 12);  // the 13th CPU allocation from here throws
//   EXPECT_THROW(train_step(...), OutOfMemoryError);
//   fail.fired();                               // true; fail.seen(): allocations counted
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/device.h"

namespace frugal::memory {

class InjectOom {
 public:
  InjectOom(Device device, int64_t nth);
  ~InjectOom();
  InjectOom(const InjectOom&) = delete;
  InjectOom& operator=(const InjectOom&) = delete;

  int64_t seen() const;  // allocations on the device counted so far, the failed one included
  bool fired() const;
};

namespace detail {
// Called by the allocators before serving `bytes` on `device`: throws OutOfMemoryError when an
// InjectOom says this is the allocation to fail. One relaxed load when none is alive.
void check_injected_oom(Device device, size_t bytes);
}  // namespace detail

}  // namespace frugal::memory
