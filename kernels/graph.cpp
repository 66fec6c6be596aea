// DeviceGraph on the CUDA runtime's stream capture; without CUDA every entry says so.
#include "kernels/graph.h"

#include "base/error.h"
#include "kernels/context.h"

#ifdef FRUGAL_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"  // DeviceGuard
#include "kernels/cuda/runtime.h"
#endif

namespace frugal::kernels {

bool graph_capture_supported(Device device) noexcept {
#ifdef FRUGAL_WITH_CUDA
  return device.is_cuda() && device.index >= 0 && device.index < cuda::device_count();
#else
  (void)device;
  return false;
#endif
}

DeviceGraph::DeviceGraph(Device device) : device_(device) {
#ifdef FRUGAL_WITH_CUDA
  const char* why = " (graphs need one of the visible CUDA devices)";
#else
  const char* why = " (frugal was built without CUDA)";
#endif
  FRUGAL_CHECK(graph_capture_supported(device), "DeviceGraph: cannot capture graphs on ", device,
               why);
}

#ifdef FRUGAL_WITH_CUDA
namespace {
cudaStream_t stream_of_device(Device device) {
  return static_cast<cudaStream_t>(cuda::compute_stream(device));
}
}  // namespace

DeviceGraph::~DeviceGraph() {
  abort_capture();
  if (exec_ != nullptr) {
    cuda::DeviceGuard guard(device_);
    CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_of_device(device_)));
    CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
  }
  if (graph_ != nullptr) CUDA_CHECK_NOTHROW(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
}

void DeviceGraph::begin_capture() {
  FRUGAL_CHECK(!capturing_ && exec_ == nullptr, "DeviceGraph::begin_capture on ", device_,
               ": this graph is ", capturing_ ? "already capturing" : "already captured");
  cuda::DeviceGuard guard(device_);
  CUDA_CHECK(cudaStreamBeginCapture(stream_of_device(device_), cudaStreamCaptureModeRelaxed));
  capturing_ = true;
}

void DeviceGraph::end_capture() {
  FRUGAL_CHECK(capturing_, "DeviceGraph::end_capture on ", device_, ": not capturing");
  cuda::DeviceGuard guard(device_);
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  const cudaError_t ended = cudaStreamEndCapture(stream_of_device(device_), &graph);
  if (ended != cudaSuccess) {
    (void)cudaGetLastError();  // the capture's own error, reported below
    if (graph != nullptr) cudaGraphDestroy(graph);
    FRUGAL_FAIL("DeviceGraph::end_capture on ", device_, ": the capture was invalidated (",
                cudaGetErrorString(ended), "); a call inside it conflicted with capture");
  }
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
}

void DeviceGraph::abort_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream_of_device(device_), &graph);
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

void DeviceGraph::replay() {
  FRUGAL_CHECK(exec_ != nullptr, "DeviceGraph::replay on ", device_, ": nothing captured yet");
  cuda::DeviceGuard guard(device_);
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream_of_device(device_)));
}

int64_t DeviceGraph::num_nodes() const {
  if (graph_ == nullptr) return 0;
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(static_cast<cudaGraph_t>(graph_), nullptr, &n));
  return static_cast<int64_t>(n);
}

#else  // no CUDA: the constructor has already thrown

DeviceGraph::~DeviceGraph() = default;
void DeviceGraph::begin_capture() { FRUGAL_FAIL("DeviceGraph: built without CUDA"); }
void DeviceGraph::end_capture() { FRUGAL_FAIL("DeviceGraph: built without CUDA"); }
void DeviceGraph::abort_capture() noexcept {}
void DeviceGraph::replay() { FRUGAL_FAIL("DeviceGraph: built without CUDA"); }
int64_t DeviceGraph::num_nodes() const { return 0; }

#endif

}  // namespace frugal::kernels
