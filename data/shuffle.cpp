// Seeded per-epoch permutations (splitmix64 counters, Lemire's multiply-shift for the bound).
#include "data/shuffle.h"

#include <numeric>
#include <utility>

#include "base/error.h"
#include "kernels/random.h"

namespace frugal::data {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  const uint64_t key =
      kernels::mix64(kernels::mix64(seed ^ 0x73687566666c65ull) + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t r = kernels::mix64(key ^ (static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull));
    // 64-bit draws: the bias of the multiply-shift is below 2^-32 for any dataset size.
    auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

int64_t shard_size(int64_t n, int64_t world) {
  FRUGAL_CHECK(n >= 0 && world >= 1, "shard_size: bad n=", n, " or world size ", world);
  return n / world + (n % world != 0 ? 1 : 0);  // n + world - 1 could pass INT64_MAX
}

int64_t shard_unpadded_size(int64_t n, int64_t rank, int64_t world) {
  FRUGAL_CHECK(world >= 1 && rank >= 0 && rank < world, "shard_unpadded_size: rank ", rank,
               " is not in [0, ", world, ")");
  // Positions rank, rank + world, ... below n.
  return rank < n ? (n - rank - 1) / world + 1 : 0;
}

std::vector<int64_t> rank_shard(const std::vector<int64_t>& order, int64_t rank, int64_t world) {
  FRUGAL_CHECK(world >= 1 && rank >= 0 && rank < world, "rank_shard: rank ", rank,
               " is not in [0, ", world, ")");
  const auto n = static_cast<int64_t>(order.size());
  const int64_t each = shard_size(n, world);
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(each));
  for (int64_t k = 0; k < each; ++k) {
    const int64_t position = rank + k * world;  // in the order padded by its own start
    shard.push_back(order[static_cast<size_t>(position % n)]);
  }
  return shard;
}

}  // namespace frugal::data
