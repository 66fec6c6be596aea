// Counters by which the last block of a group of blocks finds itself, so that a reduction split
// across blocks finishes in its own kernel instead of a second launch (Note [Finishing in the
// last block]).
#pragma once

#include <cstdint>

#include "kernels/context.h"

namespace frugal::kernels::cuda {

// Counters a kernel may take on ctx's stream: zero before it starts and to be left zero when it
// ends (last_to_arrive resets each one it completes). kArrivalCounters of them per stream, at
// most kArrivalStreams streams per device; null where `count` is more than that or the device's
// slots are taken, and the caller then finishes with a launch of its own.
constexpr int64_t kArrivalCounters = 1024;
constexpr int kArrivalStreams = 16;
int* arrival_counters(const Context& ctx, int64_t count);

#ifdef __CUDACC__
// True, in every thread of the block, for the last of `members` blocks to call this on `counter`;
// that block then sees what the others wrote before their call. Every thread of the block must
// call it. The last block resets the counter to zero for the next launch.
__device__ __forceinline__ bool last_to_arrive(int* counter, int members) {
  __shared__ int last;
  __syncthreads();  // the block's writes are issued
  if (threadIdx.x == 0) {
    __threadfence();  // ... and visible to the device before the count says so
    last = atomicAdd(counter, 1) == members - 1;
    if (last) atomicExch(counter, 0);
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}
#endif

}  // namespace frugal::kernels::cuda
