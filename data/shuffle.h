// The order an epoch visits a dataset: a Fisher-Yates permutation drawn from (seed, epoch) alone,
// so it is the same on any machine and for any number of loader workers.
#pragma once

#include <cstdint>
#include <vector>

namespace frugal::data {

// 0..n-1 when !shuffle, else a uniform permutation determined by (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

// Note [Sharding an epoch across ranks]: with data parallelism each of `world` processes visits
// its own part of the same epoch order (every rank draws the same permutation from the shared
// seed), as PyTorch's DistributedSampler does: rank r takes positions r, r + world, r + 2 world,
// ... of the order, first padded by repeating its start until it divides evenly. Every rank thus
// gets shard_size(n, world) samples and runs the same number of batches, so no rank waits in a
// collective for one that has finished its epoch; at most world - 1 samples are seen twice.
int64_t shard_size(int64_t n, int64_t world);
// How many of rank `rank`'s shard_size(n, world) samples are not padding: the padding is the
// shard's last sample or none (positions grow with k), so these are its first ones. What an
// evaluation counts, so that the job's accuracy does not depend on the number of ranks.
int64_t shard_unpadded_size(int64_t n, int64_t rank, int64_t world);
std::vector<int64_t> rank_shard(const std::vector<int64_t>& order, int64_t rank, int64_t world);

}  // namespace frugal::data
