// CopyEvent without CUDA: nothing is ever asynchronous, so there is nothing to wait for.
// The CUDA build compiles data/cuda/copy_event.cpp instead.
#include "data/copy_event.h"

#if !defined(FRUGAL_WITH_CUDA)
namespace frugal::data {

CopyEvent::~CopyEvent() = default;

void CopyEvent::record(const kernels::Context& ctx) {
  FRUGAL_FAIL("CopyEvent: frugal was built without CUDA, cannot record on ", ctx.device);
}

void CopyEvent::wait() {}

void CopyEvent::stream_wait(const kernels::Context& ctx) {
  FRUGAL_FAIL("CopyEvent: frugal was built without CUDA, cannot wait on ", ctx.device);
}

kernels::Context copy_context(Device device) {
  FRUGAL_FAIL("copy_context: frugal was built without CUDA, no copy stream on ", device);
}

}  // namespace frugal::data
#endif
