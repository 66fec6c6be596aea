// Capture and replay of what one device's compute stream is given: a CUDA graph. Between
// begin_capture and end_capture the stream records instead of running; replay() then launches
// the whole recording with one call, so a step of a thousand small kernels costs the host one
// launch instead of a thousand. What may be captured, and what keeps a capture valid, is the
// caller's business (train/captured_step.h does it for a training step).
//
//   kernels::DeviceGraph g(Device::cuda(0));
//   g.begin_capture();
//   ... launches on the compute stream ...
//   g.end_capture();
//   g.replay();  // runs them
#pragma once

#include <cstdint>

#include "base/device.h"

namespace frugal::kernels {

// True where graphs can be captured: a CUDA build and a CUDA device that exists. Never throws.
bool graph_capture_supported(Device device) noexcept;

class DeviceGraph {
 public:
  explicit DeviceGraph(Device device);  // throws unless graph_capture_supported(device)
  ~DeviceGraph();                       // waits for its replays, then frees the graph
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Starts recording the compute stream. Relaxed mode: the caching allocator may cudaMalloc a
  // segment meanwhile (its private pool keeps that memory for the graph); calls that conflict
  // with capture (a synchronisation, a read back to the host) still fail, naming the call.
  void begin_capture();
  // Stops recording and instantiates the graph; throws if the recording was invalidated.
  void end_capture();
  // Stops a capture that an error interrupted and drops what was recorded. Never throws.
  void abort_capture() noexcept;
  void replay();              // one launch of the whole graph on the compute stream
  int64_t num_nodes() const;  // kernels, memsets and copies recorded; 0 before end_capture
  bool capturing() const { return capturing_; }

 private:
  Device device_;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  bool capturing_ = false;
};

}  // namespace frugal::kernels
