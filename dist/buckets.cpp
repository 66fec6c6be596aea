// Note [Gradient buckets] in buckets.h.
#include "dist/buckets.h"

#include "base/error.h"

namespace frugal::dist {

std::vector<Bucket> plan_buckets(const std::vector<BucketParam>& params, size_t cap_bytes,
                                 size_t first_cap_bytes) {
  FRUGAL_CHECK(cap_bytes > 0 && first_cap_bytes > 0, "plan_buckets: bucket caps must be positive");
  std::vector<Bucket> buckets;
  for (size_t k = params.size(); k-- > 0;) {
    const BucketParam& p = params[k];
    const size_t cap = buckets.size() == 1 ? first_cap_bytes : cap_bytes;  // of the open bucket
    const bool fits = !buckets.empty() && buckets.back().dtype == p.dtype &&
                      buckets.back().bytes() + p.numel * dtype_size(p.dtype) <= cap;
    if (!fits) buckets.push_back({.params = {}, .numel = 0, .dtype = p.dtype});
    buckets.back().params.push_back(k);
    buckets.back().numel += p.numel;
  }
  return buckets;
}

}  // namespace frugal::dist
