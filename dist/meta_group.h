// A process group on the meta device: collectives that move nothing, for dry runs (Note
// [Planned steps]) of a data-parallel step. A DataParallel model on meta wrapped over it asks for
// the same memory, in the same order, as on a real group of that size, so the plan made before
// the first step covers the gradient buckets too.
#pragma once

#include "dist/process_group.h"

namespace frugal::dist {

class MetaGroup final : public ProcessGroup {
 public:
  explicit MetaGroup(int size, int rank = 0);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::meta(); }
  std::string backend() const override { return "meta"; }
  void all_reduce(Tensor& t, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override {}

 private:
  int size_, rank_;
};

}  // namespace frugal::dist
