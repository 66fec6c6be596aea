// Seeded per-epoch permutations (splitmix64 counters, Lemire's multiply-shift for the bound).
#include "data/shuffle.h"

#include <numeric>
#include <utility>

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

}  // namespace frugal::data
