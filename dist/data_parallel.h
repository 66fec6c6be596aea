// Data-parallel training (PyTorch's DistributedDataParallel): every rank holds a replica of the
// model, trains on its own shard of each batch, and all-reduces gradients so the replicas take
// the same optimizer step.
//
//   auto group = dist::init_process_group(env, device);          // dist/init.h
//   auto model = std::make_shared<dist::DataParallel>(net, group);  // after net.to(device)
//   ... loss = cross_entropy((*model)(x), y); loss.backward(); opt.step();  // as on one GPU
//
// Note [Data parallelism]
// - At construction rank 0's parameters and buffers are broadcast, so the replicas start equal
//   whatever each rank's seed was.
// - Backward: a hook on each parameter (Note [Gradient hooks]) counts the gradients of its bucket
//   (Note [Gradient buckets]); once a bucket and every bucket before it are complete, its
//   gradients are flattened into one buffer and its average across ranks (in reduce_dtype) is
//   started (all_reduce_async: on GPUs it runs on a communication stream while backward goes
//   on). Buckets start in index order on every rank, as PyTorch's Reducer launches them: a
//   parameter with a gradient on one rank and none on another would otherwise complete
//   different buckets first, and the ranks would average one bucket with another. Buckets still
//   open when backward ends (a parameter without a gradient) are started then, in order; then
//   every bucket is waited for and written back as its parameters' .grad. A parameter no rank gave
//   a gradient keeps none (Note [Globally unused parameters]). Every rank ends backward with
//   bit-identical gradients (Note [Collectives]), so the optimizer keeps the replicas equal.
//   Memory: the buckets in flight, at most one copy of the gradients.
// - Gradient accumulation: every backward averages what .grad holds. Averaging is linear and
//   the part accumulated earlier is already equal on every rank, so the result is the average of
//   the accumulated gradients, as with one reduction at the end. Inside no_sync() backward
//   reduces nothing (PyTorch's DDP.no_sync): train_step runs all micro-batches but the last so,
//   and one all-reduce a step remains.
// - Mixed precision: with a GradScaler, agree_on_overflow makes every rank skip the same steps.
// - BatchNorm stays local to each rank (its batch statistics are the rank's shard's): two ranks
//   of B images train as one process accumulating two micro-batches of B. With
//   broadcast_buffers every forward, training or evaluating, starts from rank 0's running
//   statistics (DDP's default), so all ranks evaluate rank 0's model, the one it saves. Every
//   rank must therefore run the same number of forwards (sharded loaders make sure of it).
// - Parameters are those of the module at construction: move it to its device first.
//
// Note [Globally unused parameters]
// A parameter that no rank's loss reached keeps no gradient, as in one process and as PyTorch's
// DDP leaves it (find_unused_parameters): an optimizer then skips it, where a zero gradient would
// still apply weight decay and momentum to it, and the run would train differently from one
// process. Which parameters some rank used needs every rank's answer, so each bucket carries one
// flag a parameter behind its gradients (1 where the rank had a gradient) and the average is
// above 0 where any rank had one: no extra collective, and a rank reads the flags back only when
// it lacked a gradient itself. A parameter used on some ranks gets the average everywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/grad_hooks.h"
#include "dist/buckets.h"
#include "dist/process_group.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"

namespace frugal::dist {

struct DataParallelOptions {
  size_t bucket_cap_bytes = size_t{25} << 20;       // DDP's 25 MiB
  size_t first_bucket_cap_bytes = size_t{1} << 20;  // DDP's 1 MiB: communication starts early
  // The dtype gradients travel and are averaged in: f32, or f16/bf16 for half the traffic.
  DType reduce_dtype = DType::f32;
  bool broadcast_buffers = true;
};

class DataParallel final : public nn::Module {
 public:
  DataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
               DataParallelOptions options = {});
  ~DataParallel() override;

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DataParallel"; }

  nn::Module& module() const { return *module_; }
  ProcessGroup& group() const { return *group_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Of the last backward: buckets reduced while it still ran, and at its end.
  struct Overlap {
    int64_t during_backward = 0;
    int64_t at_end = 0;
  };
  Overlap last_overlap() const { return last_overlap_; }
  // While the returned guard lives, backward leaves gradients local (they accumulate); the next
  // backward outside it averages everything accumulated.
  class NoSync {
   public:
    explicit NoSync(DataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSync() { ddp_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  // Buckets all-reduced since construction (each backward outside no_sync reduces them all).
  int64_t buckets_reduced() const { return buckets_reduced_; }
  // True when every rank's parameters hold the same bits (a hash of them compared across ranks,
  // so it copies them to the host once): the check at the end of a run that the replicas did
  // not drift apart. Every rank must call it.
  bool replicas_agree();

 private:
  void reset_backward_state();
  // Starts every bucket from next_start_ on that is complete, in order, up to the first open one.
  void start_complete_buckets();
  void broadcast_buffers();  // rank 0's, to every rank
  void on_gradient(size_t param);
  void start_bucket(size_t bucket);
  void finish_backward();

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DataParallelOptions options_;
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // by parameter
  std::vector<autograd::HookHandle> hooks_;
  // This backward's progress.
  std::vector<bool> ready_;      // by parameter
  std::vector<size_t> missing_;  // gradients each bucket still waits for
  struct InFlight {
    Tensor flat;  // the bucket's gradients and one used flag each, averaged in place
    std::vector<double> used_here;  // by bucket member: 1 where this rank had a gradient
    std::unique_ptr<Work> work;
  };
  std::vector<InFlight> in_flight_;  // by bucket; empty until started
  size_t next_start_ = 0;            // buckets before it are started
  bool finish_queued_ = false;
  bool sync_ = true;  // false inside no_sync()
  int64_t buckets_reduced_ = 0;
  Overlap overlap_, last_overlap_;
};

// Makes `scaler` take the maximum of every rank's found-inf flag before each optimizer step, so
// all ranks skip a step when any rank's gradients overflowed.
void agree_on_overflow(optim::GradScaler& scaler, std::shared_ptr<ProcessGroup> group);

}  // namespace frugal::dist
