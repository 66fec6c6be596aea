// Note [NCCL collectives] in dist/nccl_group.h.
#include "dist/nccl_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "base/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/runtime.h"

#define NCCL_CHECK(stmt)                                                                      \
  do {                                                                                        \
    ncclResult_t frugal_nccl_status_ = (stmt);                                                \
    FRUGAL_CHECK(frugal_nccl_status_ == ncclSuccess, "NCCL error ", int(frugal_nccl_status_), \
                 " (", ncclGetErrorString(frugal_nccl_status_), ") in `" #stmt "`");          \
  } while (0)

namespace frugal::dist {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f64:
      return ncclFloat64;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  FRUGAL_FAIL("NCCL: no NCCL type for ", t);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  FRUGAL_FAIL("NCCL: unknown reduction");
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// The compute stream waits for `done` (recorded on the communication stream).
struct NcclWork final : Work {
  NcclWork(cudaEvent_t done, cudaStream_t compute, Device device)
      : done(done), compute(compute), device(device) {}
  ~NcclWork() override {
    if (done != nullptr) CUDA_CHECK_NOTHROW(cudaEventDestroy(done));
  }
  void wait() override {
    kernels::cuda::DeviceGuard guard(device);
    CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
  }
  cudaEvent_t done;
  cudaStream_t compute;
  Device device;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(SocketGroup& rendezvous, Device device, double timeout_seconds)
      : rank_(rendezvous.rank()),
        size_(rendezvous.size()),
        device_(device),
        timeout_(timeout_seconds) {
    FRUGAL_CHECK(device.is_cuda(), "NcclGroup: device must be a GPU, got ", device);
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // Note [NCCL collectives]
    ncclUniqueId id{};
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    rendezvous.broadcast_bytes(&id, sizeof id, 0);
    kernels::cuda::DeviceGuard guard(device_);
    NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    compute_ = static_cast<cudaStream_t>(kernels::cuda::compute_stream(device_));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    kernels::cuda::DeviceGuard guard(device_);
    for (Pending& p : pending_) CUDA_CHECK_NOTHROW(cudaEventDestroy(p.done));
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (comm_stream_ != nullptr) CUDA_CHECK_NOTHROW(cudaStreamDestroy(comm_stream_));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return device_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(Tensor& t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }

  std::unique_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) override {
    check_collective_tensor(*this, "all_reduce", t);
    return launch("all_reduce", t, [&](cudaStream_t s) {
      NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                               nccl_dtype(t.dtype()), nccl_op(op), comm_, s));
    });
  }

  void broadcast(Tensor& t, int root) override {
    check_collective_tensor(*this, "broadcast", t);
    FRUGAL_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of ", size_);
    launch("broadcast", t, [&](cudaStream_t s) {
      NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                               nccl_dtype(t.dtype()), root, comm_, s));
    })->wait();
  }

  void barrier() override {
    Tensor one = Tensor::empty({1}, {.device = device_});
    all_reduce(one, ReduceOp::sum);
    kernels::cuda::DeviceGuard guard(device_);
    CUDA_CHECK(cudaStreamSynchronize(compute_));  // the host waits: that is what a barrier is
  }

 private:
  struct Pending {
    cudaEvent_t done;
    Clock::time_point started;
    std::string what;
  };

  template <typename Enqueue>
  std::unique_ptr<Work> launch(const char* op, const Tensor& t, Enqueue enqueue) {
    kernels::cuda::DeviceGuard guard(device_);
    // The communication stream starts after everything the compute stream queued so far (the
    // bucket's packing), and the caller's wait() orders the compute stream after it.
    cudaEvent_t ready = new_event();
    CUDA_CHECK(cudaEventRecord(ready, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));
    enqueue(comm_stream_);
    cudaEvent_t done = new_event();
    CUDA_CHECK(cudaEventRecord(done, comm_stream_));
    ++sequence_;
    // Inside a CUDA-graph capture nothing runs yet, and an event recorded there cannot be
    // queried: the watchdog follows eager collectives only (a replayed one that hangs is not
    // caught).
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(compute_, &capture));
    if (capture == cudaStreamCaptureStatusNone) {
      cudaEvent_t watched = new_event();
      CUDA_CHECK(cudaEventRecord(watched, comm_stream_));
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back({watched, Clock::now(),
                          std::string(op) + " #" + std::to_string(sequence_) + " of " +
                              std::to_string(t.numel()) + " " + dtype_name(t.dtype()) +
                              " elements"});
    }
    return std::make_unique<NcclWork>(done, compute_, device_);
  }

  // Note [NCCL collectives]: a collective that never finishes (a dead or stuck peer) or an
  // asynchronous NCCL error ends the process with a message, instead of a silent hang.
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      if (stopping_) break;
      cudaSetDevice(device_.index);
      while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
        cudaEventDestroy(pending_.front().done);
        pending_.pop_front();
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      const bool late =
          !pending_.empty() &&
          std::chrono::duration<double>(Clock::now() - pending_.front().started).count() > timeout_;
      if (async == ncclSuccess && !late) continue;
      std::fprintf(stderr,
                   "frugal: rank %d of %d: NCCL %s %s; a peer rank has probably died or stopped "
                   "(timeout %.0f s, FRUGAL_DIST_TIMEOUT); aborting this rank\n",
                   rank_, size_, pending_.empty() ? "communicator" : pending_.front().what.c_str(),
                   async != ncclSuccess ? ncclGetErrorString(async) : "did not finish in time",
                   timeout_);
      std::fflush(stderr);
      ncclCommAbort(comm_);
      std::_Exit(3);
    }
  }

  int rank_, size_;
  Device device_;
  double timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaStream_t compute_ = nullptr;
  uint64_t sequence_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::list<Pending> pending_;
  std::thread watchdog_;
};

}  // namespace

bool nccl_available() { return true; }

std::shared_ptr<ProcessGroup> make_nccl_group(SocketGroup& rendezvous, Device device,
                                              double timeout_seconds) {
  return std::make_shared<NcclGroup>(rendezvous, device, timeout_seconds);
}

}  // namespace frugal::dist
