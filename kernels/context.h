// What every kernel entry receives besides its pointers: the device, the stream to launch on and
// the allocator workspace comes from. Kernels never allocate through new or cudaMalloc.
//
// Each op family header (kernels/conv.h, ...) declares the same entry twice, in namespaces
// kernels::cpu and kernels::cuda, and an inline dispatcher in kernels:: that picks one by
// ctx.device. Pointers are device pointers of ctx.device; n == 0 is always allowed.
#pragma once

#include "base/device.h"
#include "base/dtype.h"
#include "base/error.h"
#include "kernels/host_profile.h"
#include "memory/allocator.h"

namespace frugal::kernels {

struct Context {
  Device device = Device::cpu();
  void* stream = nullptr;                // cudaStream_t on CUDA (the device's compute stream)
  memory::Allocator* scratch = nullptr;  // workspace source; allocator_for(device) by default

  // The default context of a device: its allocator and (on CUDA) its compute stream.
  static Context of(Device device);
  // `category`: workspace, or conv_workspace for cuDNN's (Note [Bounded conv workspace]).
  memory::DataPtr workspace(size_t bytes,
                            memory::Category category = memory::Category::workspace) const {
    memory::CategoryScope tag(category);  // Note [Allocation events]
    // Released before the kernel entry returns: scratch the arena may hold (Note [Kernel
    // scratch]); cuDNN's bounded workspace is planned instead.
    memory::ScratchScope transient(category == memory::Category::workspace);
    return (scratch != nullptr ? *scratch : memory::allocator_for(device)).allocate(bytes);
  }
};

}  // namespace frugal::kernels

#if defined(FRUGAL_WITH_CUDA)
#define FRUGAL_CUDA_CALL(name, call) call
#else
#define FRUGAL_CUDA_CALL(name, call) \
  FRUGAL_FAIL(#name, ": frugal was built without CUDA, cannot run on ", ctx.device)
#endif

// Declares `void name PARAMS` in kernels::cpu and kernels::cuda, and the dispatcher in kernels::
// that calls one of them by ctx.device. PARAMS must start with `const Context& ctx`; ARGS is the
// parenthesised argument list that forwards PARAMS. On the meta device the dispatcher computes
// nothing (meta tensors have shapes and counted bytes, no data), so callers need no meta case of
// their own unless meta must allocate what the device would (a CUDA kernel's scratch).
#define FRUGAL_DECLARE_KERNEL(name, PARAMS, ARGS)                                      \
  namespace cpu {                                                                      \
  void name PARAMS;                                                                    \
  }                                                                                    \
  namespace cuda {                                                                     \
  void name PARAMS;                                                                    \
  }                                                                                    \
  inline void name PARAMS {                                                            \
    if (ctx.device.is_meta()) return;                                                  \
    host_profile::Scope frugal_profile_scope_(#name);                                  \
    if (ctx.device.is_cuda()) {                                                        \
      FRUGAL_CUDA_CALL(name, cuda::name ARGS);                                         \
    } else {                                                                           \
      FRUGAL_CHECK(ctx.device.is_cpu(), #name ": no kernels for device ", ctx.device); \
      cpu::name ARGS;                                                                  \
    }                                                                                  \
  }

namespace frugal::kernels {
// Number of usable CUDA devices; 0 when built without CUDA or when no device/driver is present.
// Never throws.
int cuda_device_count();
}  // namespace frugal::kernels
