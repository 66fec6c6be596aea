// Note [Synchronised batch norm] in sync_batch_norm.h.
#include "dist/sync_batch_norm.h"

#include "base/error.h"
#include "core/autograd.h"
#include "nn/layers.h"

namespace frugal::dist {

Tensor all_reduce_sum(const Tensor& t, const std::shared_ptr<ProcessGroup>& group) {
  FRUGAL_CHECK(group != nullptr, "all_reduce_sum: null group");
  Tensor out = t.detach().clone();
  group->all_reduce(out, ReduceOp::sum);
  return autograd::record("all_reduce_sum", {t}, out, /*saved=*/{},
                          [group](const std::vector<Tensor>& g, std::vector<Tensor>&) {
                            Tensor dx = g[0].clone();
                            group->all_reduce(dx, ReduceOp::sum);
                            return std::vector<Tensor>{dx};
                          });
}

int64_t convert_sync_batchnorm(nn::Module& model, const std::shared_ptr<ProcessGroup>& group) {
  FRUGAL_CHECK(group != nullptr, "convert_sync_batchnorm: null group");
  int64_t converted = 0;
  for (nn::Module* m : model.modules()) {
    auto* bn = dynamic_cast<nn::BatchNorm2d*>(m);
    if (bn == nullptr) continue;
    bn->cross_replica_sum = [group](const Tensor& t) { return all_reduce_sum(t, group); };
    ++converted;
  }
  return converted;
}

}  // namespace frugal::dist
