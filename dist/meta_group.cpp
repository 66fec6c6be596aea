#include "dist/meta_group.h"

#include "base/error.h"

namespace frugal::dist {

MetaGroup::MetaGroup(int size, int rank) : size_(size), rank_(rank) {
  FRUGAL_CHECK(size >= 1 && rank >= 0 && rank < size, "MetaGroup: rank ", rank, " of world size ",
               size, " is impossible");
}

void MetaGroup::all_reduce(Tensor& t, ReduceOp) { check_collective_tensor(*this, "all_reduce", t); }

void MetaGroup::broadcast(Tensor& t, int root) {
  check_collective_tensor(*this, "broadcast", t);
  FRUGAL_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of ", size_);
}

}  // namespace frugal::dist
