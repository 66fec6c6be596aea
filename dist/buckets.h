// Which gradients travel together: data parallelism all-reduces gradients in buckets of about
// `cap` bytes, launching each as soon as its last gradient exists, so communication overlaps the
// rest of backward (PyTorch DDP's Reducer).
//
// Note [Gradient buckets]
// Backward produces gradients roughly in reverse registration order (the last layer first), so
// buckets take the parameters from last to first. The first bucket is small (first_cap) so that
// communication starts early; the others fill up to cap. A bucket holds one dtype; a parameter
// larger than the cap gets a bucket of its own.
#pragma once

#include <cstddef>
#include <vector>

#include "base/dtype.h"

namespace frugal::dist {

struct BucketParam {
  size_t numel = 0;
  DType dtype = DType::f32;
};

struct Bucket {
  std::vector<size_t> params;  // indices into the planned list, in the order they join
  size_t numel = 0;
  DType dtype = DType::f32;
  size_t bytes() const { return numel * dtype_size(dtype); }
};

std::vector<Bucket> plan_buckets(const std::vector<BucketParam>& params, size_t cap_bytes,
                                 size_t first_cap_bytes);

}  // namespace frugal::dist
