// The arrival counters (arrival_counters.h): one static slice of device memory per stream.
//
// Note [Finishing in the last block]
// A reduction split across blocks (batch norm's per-channel sums: up to a thousand partial rows)
// used to finish in a second kernel. In a replayed MobileNetV2 f16 step at batch 128, 224x224,
// its 104 finishes cost 0.44 ms of 9.75 (H200: the step took 9.31 ms with them left out), most of
// it the launch and the latency of the finish itself, not its few bytes. Instead each block counts
// itself in on a counter when its partial row is written, and the last to arrive sums the rows
// and finishes. PyTorch's channels-last batch norm does the same with a zeroed tensor of
// semaphores, a memset launch per call. Here the counters need no memset: they live in a
// __device__ array, zero when the module loads, and the last block of each count puts its counter
// back to zero. A stream's launches run one after another, so one slice per stream is never
// shared by two kernels at once; a CUDA graph keeps the slice of the stream it was captured on
// and is replayed on that stream. A stream past the slots, or a kernel needing more counters,
// gets null and finishes with a second launch as before.
#include <array>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/arrival_counters.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"

namespace frugal::kernels::cuda {
namespace {

__device__ int slices[kArrivalStreams][kArrivalCounters];

}  // namespace

int* arrival_counters(const Context& ctx, int64_t count) {
  if (count > kArrivalCounters) return nullptr;
  cudaStream_t stream = stream_of(ctx, "arrival_counters");
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, int*> slot_of;
  static std::array<int, 64> used{};  // slots handed out, by device index
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(ctx.device.index, stream);
  if (auto it = slot_of.find(key); it != slot_of.end()) return it->second;
  auto& n = used.at(static_cast<size_t>(ctx.device.index));
  if (n == kArrivalStreams) return nullptr;
  DeviceGuard guard(ctx.device);
  void* base = nullptr;
  CUDA_CHECK(cudaGetSymbolAddress(&base, slices));
  int* slot = static_cast<int*>(base) + static_cast<int64_t>(n++) * kArrivalCounters;
  slot_of.emplace(key, slot);
  return slot;
}

}  // namespace frugal::kernels::cuda
