// A process group over TCP, through rank 0: the CPU's backend, and the rendezvous that hands NCCL
// its unique id. Rank 0 listens on MASTER_ADDR:MASTER_PORT; the others connect to it.
//
// Note [Reducing through rank 0]
// Each collective, every other rank sends rank 0 a header (which collective, reduction, dtype,
// element count, sequence number) and its data; rank 0 checks the headers against its own call,
// reduces in rank order in f32 (f64 and i64 in their own type), rounds once to the dtype, and
// sends everyone the same bytes. So the result is bit-identical on every rank and does not depend
// on arrival order. A mismatched call is reported to every rank, naming both calls. Traffic is
// 2 (size - 1) tensors through rank 0 per collective: right for CPU jobs of a few processes and
// for the rendezvous; GPU jobs reduce through NCCL.
//
//   dist::SocketGroup group(env.rank, env.world_size, dist::SocketGroupOptions::from_env());
//   group.all_reduce(grads, dist::ReduceOp::avg);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "dist/socket_io.h"

namespace frugal::dist {

struct SocketGroupOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;                  // torchrun's default
  double timeout_seconds = 300;             // each collective's wait for a peer
  double rendezvous_timeout_seconds = 300;  // for every rank to connect
  // MASTER_ADDR, MASTER_PORT and FRUGAL_DIST_TIMEOUT (seconds, both timeouts) where set, these
  // defaults otherwise; an error names a variable that does not parse. Under torchrun's agent
  // store (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_PORT is the store's, which torchrun keeps
  // listening for the whole run: rank 0 listens on the port after it instead, which every rank
  // of the job computes alike.
  static SocketGroupOptions from_env();
};

class SocketGroup final : public ProcessGroup {
 public:
  // Rendezvous: returns once all `size` ranks are connected (rank 0 accepts, the others
  // connect). An error names a rank that claimed an impossible or taken rank, or a world size
  // other than rank 0's.
  SocketGroup(int rank, int size, SocketGroupOptions options = {});

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu(); }
  std::string backend() const override { return "socket"; }

  void all_reduce(Tensor& t, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;

  // The same on raw bytes, for callers without tensors (NCCL's unique id).
  void broadcast_bytes(void* data, size_t n, int root);

 private:
  struct Call;
  // Rank 0: checks every rank's header against `call`, then gathers their payloads.
  void collect(const Call& call, void* data, size_t bytes, std::vector<char>* gathered);
  void answer(const Call& call, const void* data, size_t bytes);
  void ask(const Call& call, const void* data, size_t bytes);
  void await(const Call& call, void* data, size_t bytes);

  int rank_, size_;
  double timeout_;
  uint64_t sequence_ = 0;
  std::vector<Socket> peers_;  // rank 0: one per rank (index 0 unused); others: [0] is rank 0
};

}  // namespace frugal::dist
