// The collectives data-parallel training needs, over the processes of one job (one per GPU):
// all-reduce, broadcast and barrier, in place on tensors. Two backends stand behind it:
// SocketGroup (dist/socket_group.h: TCP through rank 0, the CPU's and the rendezvous) and
// NcclGroup (dist/nccl_group.h: NCCL on the GPUs).
//
// Note [Collectives]
// Every rank calls the same collectives in the same order with tensors of the same shape and
// dtype (as in torch.distributed); a backend that can see a mismatch reports it naming both ranks'
// calls. The result of all_reduce is bit-identical on every rank, so replicas that apply it stay
// identical. A peer that dies or stops answering is an error naming its rank (after the group's
// timeout), never a hang.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace frugal::dist {

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

// A collective in flight (all_reduce_async). wait() orders its result before what runs next: on
// the host for the CPU, on the device's compute stream for a GPU (the host does not block).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where its tensors must live: the CPU for sockets, the rank's GPU for NCCL.
  virtual Device device() const = 0;
  virtual std::string backend() const = 0;  // "socket", "nccl"

  // In place over a contiguous tensor on device(): every rank ends with the elementwise sum
  // (avg: the sum / size(), max: the largest) of all ranks' tensors.
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  // The same, started now and finished by the Work's wait(): a GPU backend runs it on a stream of
  // its own, so the device's compute goes on meanwhile. `t` must stay alive, and untouched, until
  // then. By default it runs all_reduce at once.
  virtual std::unique_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op);
  // Every rank ends with root's tensor.
  virtual void broadcast(Tensor& t, int root) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;
};

// Host numbers through a group (metrics, counts): each rank's values, reduced elementwise.
std::vector<double> all_reduce_values(ProcessGroup& group, std::vector<double> values, ReduceOp op);

// The checks every backend makes before a collective: defined, contiguous, on the group's device,
// a dtype it reduces.
void check_collective_tensor(const ProcessGroup& group, const char* op, const Tensor& t);

}  // namespace frugal::dist
