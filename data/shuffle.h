// The order an epoch visits a dataset: a Fisher-Yates permutation drawn from (seed, epoch) alone,
// so it is the same on any machine and for any number of loader workers.
#pragma once

#include <cstdint>
#include <vector>

namespace frugal::data {

// 0..n-1 when !shuffle, else a uniform permutation determined by (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

}  // namespace frugal::data
