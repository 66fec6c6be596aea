// What a kernel boundary costs inside a replayed CUDA graph, and how much of it programmatic
// dependent launch (PDL) or a cooperative grid sync win back: the question behind fusing batch
// norm's finish into its partial kernel (bench/RESULTS.md, session 24). A standalone CUDA
// program, not linked with frugal; `build-gpu/launch_boundary_probe` prints a line per size.
//
// Each line: a chain of 200 dependent elementwise passes (y = x * 1.0001 + 1 over float4,
// alternating two buffers) captured into a graph and replayed 20 times, microseconds a pass:
// - plain: 200 launches;
// - PDL: the same launches with programmaticStreamSerializationAllowed, each kernel letting the
//   next be scheduled at its start and waiting for the previous one's writes before it reads;
// - cooperative pairs: 100 cooperative launches of two passes each, a grid sync between them.
// The grids are one wave (the blocks the device holds at once), as frugal's row passes are.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "probe_common.cuh"

namespace cg = cooperative_groups;

namespace {

using probe::check;

__device__ __forceinline__ float4 pass(float4 v) {
  return make_float4(v.x * 1.0001f + 1.0f, v.y * 1.0001f + 1.0f, v.z * 1.0001f + 1.0f,
                     v.w * 1.0001f + 1.0f);
}

template <bool kPdl>
__global__ void step_kernel(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
  if constexpr (kPdl) {
    cudaTriggerProgrammaticLaunchCompletion();  // the next grid may be scheduled now
    cudaGridDependencySynchronize();            // the previous grid's writes are visible
  }
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n4;
       i += long{gridDim.x} * blockDim.x) {
    y[i] = pass(x[i]);
  }
}

__global__ void two_steps_kernel(float4* a, float4* b, long n4) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n4;
       i += long{gridDim.x} * blockDim.x) {
    b[i] = pass(a[i]);
  }
  cg::this_grid().sync();
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n4;
       i += long{gridDim.x} * blockDim.x) {
    a[i] = pass(b[i]);
  }
}

enum class Mode { plain, pdl, cooperative };

constexpr int kChain = 200, kReplays = 20, kThreads = 256;

// Captures the chain in `mode`, replays it, returns microseconds a pass.
float time_chain(Mode mode, cudaStream_t s, float4* a, float4* b, long n4) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  for (int k = 0; k < kChain; ++k) {
    const float4* src = k % 2 ? b : a;
    float4* dst = k % 2 ? a : b;
    cudaLaunchConfig_t cfg = {};
    cfg.blockDim = kThreads;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (mode == Mode::plain) {
      step_kernel<false>
          <<<probe::one_wave(step_kernel<false>, kThreads, n4), kThreads, 0, s>>>(src, dst, n4);
    } else if (mode == Mode::pdl) {
      cfg.gridDim = probe::one_wave(step_kernel<true>, kThreads, n4);
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      check(cudaLaunchKernelEx(&cfg, step_kernel<true>, src, dst, n4), "PDL launch");
    } else if (k % 2 == 0) {
      cfg.gridDim = probe::one_wave(two_steps_kernel, kThreads, n4);
      attr[0].id = cudaLaunchAttributeCooperative;
      attr[0].val.cooperative = 1;
      check(cudaLaunchKernelEx(&cfg, two_steps_kernel, a, b, n4), "cooperative launch");
    }
  }
  check(cudaStreamEndCapture(s, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphLaunch(exec, s), "warm-up replay");
  check(cudaStreamSynchronize(s), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start, s), "record");
  for (int r = 0; r < kReplays; ++r) check(cudaGraphLaunch(exec, s), "replay");
  check(cudaEventRecord(stop, s), "record");
  check(cudaEventSynchronize(stop), "synchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  check(cudaEventDestroy(start), "event");
  check(cudaEventDestroy(stop), "event");
  check(cudaGraphExecDestroy(exec), "destroy");
  check(cudaGraphDestroy(graph), "destroy");
  return ms * 1000.0f / (kReplays * kChain);
}

}  // namespace

int main() {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("%s: us a pass in a replayed chain of %d (HBM bound: 2 x bytes at 4.8 TB/s)\n",
              prop.name, kChain);
  for (long bytes : {64L << 10, 1L << 20, 4L << 20, 16L << 20, 64L << 20}) {
    const long n4 = bytes / 16;
    float4 *a, *b;
    check(cudaMalloc(&a, bytes), "malloc");
    check(cudaMalloc(&b, bytes), "malloc");
    check(cudaMemset(a, 0, bytes), "memset");
    check(cudaMemset(b, 0, bytes), "memset");
    const float plain = time_chain(Mode::plain, s, a, b, n4);
    const float pdl = time_chain(Mode::pdl, s, a, b, n4);
    const float coop = time_chain(Mode::cooperative, s, a, b, n4);
    std::printf("%6ld KiB: plain %6.2f, PDL %6.2f, cooperative pairs %6.2f, bound %6.2f\n",
                bytes >> 10, plain, pdl, coop, 2.0 * bytes / 4.8e12 * 1e6);
    check(cudaFree(a), "free");
    check(cudaFree(b), "free");
  }
  return 0;
}
