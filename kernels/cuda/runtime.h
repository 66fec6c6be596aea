// The CUDA runtime pieces the rest of kernels/ needs: per-device compute and copy streams, handles,
// copies and the error-check macros. Only compiled when FRUGAL_WITH_CUDA is defined.
#pragma once

#include <cstddef>

#include "kernels/context.h"

namespace frugal::kernels::cuda {

int device_count();                   // 0 when no driver or device; never throws
void* compute_stream(Device device);  // the one compute stream of a device (cudaStream_t)
// The one host-to-device copy stream of a device (cudaStream_t, non-blocking), for copies that
// overlap compute (the DataLoader's). Work on it is ordered with the compute stream only through
// events: see Note [Loader host copies] in data/loader.h.
void* copy_stream(Device device);
void synchronize(Device device);
void copy_bytes(const Context& ctx, Device dst_device, void* dst, Device src_device,
                const void* src, size_t bytes);
// Forgets the convolution algorithms chosen so far (Note [Conv algorithm cache] in conv.cu): the
// next call of each configuration chooses again, as in a new process. For tests of the choice.
void forget_conv_algorithms();

}  // namespace frugal::kernels::cuda
