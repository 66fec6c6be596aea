// CUDA runtime pieces: device count, one compute and one copy stream per device, synchronisation,
// copies, the device guard, per-thread library handles and check.h's FRUGAL_CUDA_SYNC switch.
#include "kernels/cuda/runtime.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"

namespace frugal::kernels::cuda {
namespace {

constexpr int kMaxDevices = 16;  // as memory/'s allocator registry

int checked_index(Device device, const char* op) {
  FRUGAL_CHECK(device.is_cuda(), op, ": ", device, " is not a CUDA device");
  FRUGAL_CHECK(device.index >= 0 && device.index < device_count(), op, ": no device ", device, " (",
               device_count(), " CUDA devices visible)");
  return device.index;
}

}  // namespace

namespace detail {

bool sync_after_launch() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("FRUGAL_CUDA_SYNC");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

}  // namespace detail

int device_count() {
  static const int count = []() noexcept {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no driver" error
      return 0;
    }
    return n < 0 ? 0 : (n > kMaxDevices ? kMaxDevices : n);
  }();
  return count;
}

DeviceGuard::DeviceGuard(Device device) {
  int target = checked_index(device, "DeviceGuard");
  CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != target) {
    CUDA_CHECK(cudaSetDevice(target));
  } else {
    previous_ = -1;  // nothing to restore
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
}

namespace {
// One stream per device and purpose, created on first use and never destroyed (like the handles:
// the runtime may be gone when static destructors run).
template <int Purpose>
void* device_stream(Device device, const char* op) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<cudaStream_t, kMaxDevices> streams{};
  int i = checked_index(device, op);
  std::call_once(once[static_cast<size_t>(i)], [&] {
    DeviceGuard guard(device);
    // Non-blocking: it never waits for the legacy default stream, which frugal never uses.
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[static_cast<size_t>(i)], cudaStreamNonBlocking));
  });
  return streams[static_cast<size_t>(i)];
}
}  // namespace

void* compute_stream(Device device) { return device_stream<0>(device, "compute_stream"); }

void* copy_stream(Device device) { return device_stream<1>(device, "copy_stream"); }

void synchronize(Device device) {
  DeviceGuard guard(device);
  CUDA_CHECK(cudaDeviceSynchronize());
}

void copy_bytes(const Context& ctx, Device dst_device, void* dst, Device src_device,
                const void* src, size_t bytes) {
  if (bytes == 0) return;
  FRUGAL_CHECK(dst_device.is_cuda() || src_device.is_cuda(), "copy: neither ", src_device, " nor ",
               dst_device, " is a CUDA device");
  FRUGAL_CHECK(dst != nullptr && src != nullptr, "copy: null pointer copying ", bytes,
               " bytes from ", src_device, " to ", dst_device);
  Device dev = ctx.device.is_cuda() ? ctx.device : (dst_device.is_cuda() ? dst_device : src_device);
  for (Device d : {dst_device, src_device}) {
    FRUGAL_CHECK(d.is_cpu() || d == dev || ctx.device.is_cuda(), "copy: ", src_device, " to ",
                 dst_device, " with a context of ", ctx.device);
  }
  DeviceGuard guard(dev);
  auto stream = static_cast<cudaStream_t>(
      ctx.device.is_cuda() && ctx.stream != nullptr ? ctx.stream : compute_stream(dev));
  // Unified addressing lets cudaMemcpyDefault infer the direction, peer copies included.
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  if (dst_device.is_cpu()) CUDA_CHECK(cudaStreamSynchronize(stream));
}

cudaStream_t stream_of(const Context& ctx, const char* op) {
  FRUGAL_CHECK(ctx.device.is_cuda(), op, ": CUDA kernel called with a context of ", ctx.device);
  if (ctx.stream != nullptr) return static_cast<cudaStream_t>(ctx.stream);
  return static_cast<cudaStream_t>(compute_stream(ctx.device));
}

namespace {

// A device attribute, read once per device (they do not change while the process runs).
template <cudaDeviceAttr Attr>
int cached_attribute(int device, const char* op) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<int, kMaxDevices> values{};
  int i = checked_index(Device::cuda(device), op);
  std::call_once(once[static_cast<size_t>(i)], [&] {
    CUDA_CHECK(cudaDeviceGetAttribute(&values[static_cast<size_t>(i)], Attr, i));
  });
  return values[static_cast<size_t>(i)];
}

}  // namespace

int sm_count(int device) {
  return cached_attribute<cudaDevAttrMultiProcessorCount>(device, "sm_count");
}

int compute_major(int device) {
  return cached_attribute<cudaDevAttrComputeCapabilityMajor>(device, "compute_major");
}

int resident_blocks(int device, const void* kernel, int threads) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int>, int> cache;
  const auto key = std::make_tuple(device, kernel, threads);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  DeviceGuard guard(Device::cuda(device));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0));
  return cache[key] = std::max(blocks, 1);
}

namespace {

// Note [Handle lifetime]: handles live as long as their thread and are deliberately never
// destroyed: thread-exit destructors of the main thread run after the CUDA runtime may have
// shut down, where cublasDestroy/cudnnDestroy can crash (PyTorch leaks them for the same reason).
struct ThreadHandles {
  std::array<cublasHandle_t, kMaxDevices> cublas{};
  std::array<cudnnHandle_t, kMaxDevices> cudnn{};
  std::array<cublasLtHandle_t, kMaxDevices> cublas_lt{};
  std::array<cudaStream_t, kMaxDevices> cublas_stream{};
  std::array<cudaStream_t, kMaxDevices> cudnn_stream{};
};

ThreadHandles& thread_handles() {
  thread_local ThreadHandles* h = new ThreadHandles();  // see Note [Handle lifetime]
  return *h;
}

}  // namespace

// One per device and thread, from the device allocator (leaked with the handle).
void* cublas_workspace(Device device) {
  thread_local std::array<memory::DataPtr*, kMaxDevices> ws{};
  auto& slot = ws[static_cast<size_t>(checked_index(device, "cublas_workspace"))];
  if (slot == nullptr) {
    // Library workspace that lives on: not the category of the step that first needs it.
    memory::CategoryScope tag(memory::Category::workspace);
    slot = new memory::DataPtr(memory::allocator_for(device).allocate(kCublasWorkspaceBytes));
  }
  return slot->get();
}

cublasHandle_t cublas_handle(const Context& ctx) {
  cudaStream_t stream = stream_of(ctx, "cublas_handle");
  auto i = static_cast<size_t>(checked_index(ctx.device, "cublas_handle"));
  DeviceGuard guard(ctx.device);  // handles bind to the current device
  ThreadHandles& h = thread_handles();
  if (h.cublas[i] == nullptr) {
    CUBLAS_CHECK(cublasCreate(&h.cublas[i]));
    // Plain f32 GEMMs stay IEEE f32 (no TF32) so that they match the CPU to 1e-5.
    CUBLAS_CHECK(cublasSetMathMode(h.cublas[i], CUBLAS_DEFAULT_MATH));
    h.cublas_stream[i] = nullptr;
  }
  if (h.cublas_stream[i] != stream || h.cublas_stream[i] == nullptr) {
    CUBLAS_CHECK(cublasSetStream(h.cublas[i], stream));
    // cublasSetStream resets the workspace to cuBLAS's own pool; give it ours again.
    CUBLAS_CHECK(
        cublasSetWorkspace(h.cublas[i], cublas_workspace(ctx.device), kCublasWorkspaceBytes));
    h.cublas_stream[i] = stream;
  }
  return h.cublas[i];
}

cublasLtHandle_t cublas_lt_handle(Device device) {
  auto i = static_cast<size_t>(checked_index(device, "cublas_lt_handle"));
  DeviceGuard guard(device);
  ThreadHandles& h = thread_handles();
  if (h.cublas_lt[i] == nullptr) CUBLAS_CHECK(cublasLtCreate(&h.cublas_lt[i]));
  return h.cublas_lt[i];
}

cudnnHandle_t cudnn_handle(const Context& ctx) {
  cudaStream_t stream = stream_of(ctx, "cudnn_handle");
  auto i = static_cast<size_t>(checked_index(ctx.device, "cudnn_handle"));
  DeviceGuard guard(ctx.device);
  ThreadHandles& h = thread_handles();
  if (h.cudnn[i] == nullptr) {
    CUDNN_CHECK(cudnnCreate(&h.cudnn[i]));
    h.cudnn_stream[i] = nullptr;
  }
  if (h.cudnn_stream[i] != stream || h.cudnn_stream[i] == nullptr) {
    CUDNN_CHECK(cudnnSetStream(h.cudnn[i], stream));
    h.cudnn_stream[i] = stream;
  }
  return h.cudnn[i];
}

}  // namespace frugal::kernels::cuda
