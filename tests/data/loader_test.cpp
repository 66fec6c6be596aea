// DataLoader: coverage and order per epoch, independence from num_workers, drop_last, labels
// matching images, flat host memory across epochs, early destruction and worker errors.
#include "data/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <numeric>

#include "base/error.h"
#include "data/shuffle.h"
#include "data/synthetic.h"
#include "memory/allocator.h"

using namespace frugal;
using namespace frugal::data;

namespace {

// Sample i is the constant image i + 0.5 ([3, 2, 1]) with label i % 7: a batch tells exactly
// which samples it holds.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {3, 2, 1}; }
  int64_t num_classes() const override { return 7; }
  void get(int64_t i, float* image, int64_t* label) const override {
    FRUGAL_CHECK(i != fail_at_, "IndexDataset: sample ", i, " is unreadable");
    gets_.fetch_add(1);
    for (int j = 0; j < 6; ++j) image[j] = static_cast<float>(i) + 0.5f;
    *label = i % 7;
  }
  int64_t gets() const { return gets_.load(); }

 private:
  int64_t n_, fail_at_;
  mutable std::atomic<int64_t> gets_{0};
};

// The dataset indices of one epoch, batch by batch, checking each batch's shape and labels.
std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (Batch& b : loader.epoch(epoch)) {
    EXPECT_EQ(b.index, static_cast<int64_t>(out.size()));
    EXPECT_EQ(b.images.ndim(), 4);
    EXPECT_EQ(b.images.dtype(), DType::f32);
    EXPECT_EQ(b.labels.dtype(), DType::i64);
    const int64_t n = b.images.size(0);
    EXPECT_EQ(b.labels.size(0), n);
    const float* px = b.images.data<float>();
    const int64_t* lb = b.labels.data<int64_t>();
    std::vector<int64_t> ids;
    for (int64_t j = 0; j < n; ++j) {
      int64_t id = static_cast<int64_t>(px[j * 6]);
      for (int k = 0; k < 6; ++k) EXPECT_EQ(px[j * 6 + k], id + 0.5f);
      EXPECT_EQ(lb[j], id % 7) << "label does not match image";
      ids.push_back(id);
    }
    out.push_back(ids);
  }
  return out;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& v) {
  std::vector<int64_t> f;
  for (const auto& b : v) f.insert(f.end(), b.begin(), b.end());
  return f;
}

}  // namespace

TEST(DataLoader, EverySampleOncePerEpochOrderChangesAndWorkersAgree) {
  auto ds = std::make_shared<IndexDataset>(103);
  std::map<int, std::vector<std::vector<std::vector<int64_t>>>> runs;
  for (int workers : {0, 1, 3}) {
    DataLoader loader(
        ds, {.batch_size = 10, .shuffle = true, .num_workers = workers, .prefetch = 2, .seed = 5});
    EXPECT_EQ(loader.batches_per_epoch(), 11);
    for (int64_t e = 0; e < 3; ++e) {
      auto batches = run_epoch(loader, e);
      ASSERT_EQ(batches.size(), 11u);
      EXPECT_EQ(batches.back().size(), 3u);  // 103 = 10 * 10 + 3
      std::vector<int64_t> ids = flatten(batches);
      EXPECT_EQ(ids, loader.epoch_order(e));
      std::sort(ids.begin(), ids.end());
      for (int64_t i = 0; i < 103; ++i) ASSERT_EQ(ids[i], i);
      runs[workers].push_back(batches);
    }
    EXPECT_NE(flatten(runs[workers][0]), flatten(runs[workers][1]));
    EXPECT_NE(flatten(runs[workers][1]), flatten(runs[workers][2]));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[3]);
  // Another seed, another order; no shuffle, the identity.
  DataLoader other(ds, {.batch_size = 10, .shuffle = true, .seed = 6});
  EXPECT_NE(flatten(run_epoch(other, 0)), flatten(runs[0][0]));
  DataLoader plain(ds, {.batch_size = 10, .shuffle = false, .num_workers = 2});
  std::vector<int64_t> ids = flatten(run_epoch(plain, 4));
  for (int64_t i = 0; i < 103; ++i) ASSERT_EQ(ids[i], i);
}

TEST(DataLoader, DropLast) {
  auto ds = std::make_shared<IndexDataset>(23);
  for (int workers : {0, 2}) {
    DataLoader keep(ds, {.batch_size = 5, .drop_last = false, .num_workers = workers});
    DataLoader drop(ds, {.batch_size = 5, .drop_last = true, .num_workers = workers});
    EXPECT_EQ(keep.batches_per_epoch(), 5);
    EXPECT_EQ(drop.batches_per_epoch(), 4);
    auto a = run_epoch(keep, 1), b = run_epoch(drop, 1);
    ASSERT_EQ(a.size(), 5u);
    ASSERT_EQ(b.size(), 4u);
    EXPECT_EQ(a.back().size(), 3u);
    for (const auto& batch : b) EXPECT_EQ(batch.size(), 5u);
    // Dropping the tail does not change the order of the rest.
    a.pop_back();
    EXPECT_EQ(a, b);
  }
  DataLoader tiny(ds, {.batch_size = 50, .drop_last = true});
  EXPECT_EQ(tiny.batches_per_epoch(), 0);
  tiny.begin_epoch(0);
  EXPECT_FALSE(tiny.next().has_value());
}

TEST(DataLoader, TransformsAreDeterministicAcrossWorkers) {
  auto ds = std::make_shared<SyntheticDataset>(Shape{6, 5, 1}, 3, 37, 2);
  auto t = std::make_shared<Compose>(
      std::vector<TransformPtr>{make_random_crop(6, 5, 2), make_random_horizontal_flip(0.5f),
                                make_resize(8, 8), make_repeat_channels(3)});
  std::vector<std::vector<double>> first;
  for (int workers : {0, 3}) {
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers, .seed = 8, .transforms = t});
    EXPECT_EQ(loader.sample_shape(), (Shape{8, 8, 3}));
    std::vector<std::vector<double>> got;
    for (Batch& b : loader.epoch(2)) {
      EXPECT_EQ(b.images.shape(), (Shape{b.labels.size(0), 8, 8, 3}));
      got.push_back(b.images.to_vector());
    }
    if (first.empty()) first = got;
    EXPECT_EQ(got, first);
  }
  // A different epoch draws different crops and flips.
  DataLoader loader(ds, {.batch_size = 37, .shuffle = false, .seed = 8, .transforms = t});
  std::vector<double> e0 = (*loader.epoch(0).begin()).images.to_vector();
  std::vector<double> e1 = (*loader.epoch(1).begin()).images.to_vector();
  EXPECT_NE(e0, e1);
}

TEST(DataLoader, HostMemoryFlatAcrossEpochs) {
  auto ds = std::make_shared<IndexDataset>(200);
  for (int workers : {0, 2}) {
    memory::Allocator& cpu = memory::cpu_allocator();
    const int64_t before = cpu.stats().allocated_bytes.current;
    DataLoader loader(ds, {.batch_size = 16, .num_workers = workers, .prefetch = 3, .seed = 1});
    cpu.reset_peak_stats();
    run_epoch(loader, 0);
    const memory::MemoryStats s1 = cpu.stats();
    for (int64_t e = 1; e < 5; ++e) run_epoch(loader, e);
    const memory::MemoryStats s5 = cpu.stats();
    EXPECT_GT(s1.allocated_bytes.current, before);  // the pool is real host memory
    EXPECT_EQ(s5.allocated_bytes.current, s1.allocated_bytes.current) << workers;
    EXPECT_EQ(s5.allocated_bytes.peak, s1.allocated_bytes.peak) << workers;
  }
}

TEST(DataLoader, HoardedBatchesStayValidAndMemoryReturns) {
  auto ds = std::make_shared<IndexDataset>(40);
  memory::Allocator& cpu = memory::cpu_allocator();
  const int64_t before = cpu.stats().allocated_bytes.current;
  {
    DataLoader loader(ds, {.batch_size = 4, .shuffle = false, .num_workers = 2, .prefetch = 1});
    std::vector<Batch> all;
    loader.begin_epoch(0);
    while (auto b = loader.next()) all.push_back(std::move(*b));
    ASSERT_EQ(all.size(), 10u);
    // Buffers on loan are never reused under a live batch.
    for (size_t k = 0; k < all.size(); ++k) {
      EXPECT_EQ(all[k].images.data<float>()[0], 4.0f * k + 0.5f);
    }
  }
  EXPECT_EQ(cpu.stats().allocated_bytes.current, before);
}

TEST(DataLoader, EarlyDestructionMidEpochJoinsCleanly) {
  auto ds = std::make_shared<IndexDataset>(1000);
  for (int workers : {0, 1, 4}) {
    const int64_t before = memory::cpu_allocator().stats().allocated_bytes.current;
    {
      DataLoader loader(ds, {.batch_size = 7, .num_workers = workers, .prefetch = 4});
      loader.begin_epoch(0);
      for (int k = 0; k < 3; ++k) ASSERT_TRUE(loader.next().has_value());
      // Restart mid-epoch: the new epoch starts from its first batch.
      loader.begin_epoch(1);
      auto b = loader.next();
      ASSERT_TRUE(b.has_value());
      EXPECT_EQ(b->index, 0);
      EXPECT_EQ(b->images.data<float>()[0], loader.epoch_order(1)[0] + 0.5f);
    }  // destroyed with workers mid-epoch
    EXPECT_EQ(memory::cpu_allocator().stats().allocated_bytes.current, before);
  }
  // Prefetch bounds the work done ahead of the consumer.
  auto counted = std::make_shared<IndexDataset>(1000);
  {
    DataLoader loader(counted, {.batch_size = 10, .num_workers = 3, .prefetch = 2});
    loader.begin_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
  }
  EXPECT_LE(counted->gets(), 30);
}

TEST(DataLoader, WorkerErrorsReachTheConsumerAtTheirBatch) {
  for (int workers : {0, 2}) {
    auto ds = std::make_shared<IndexDataset>(50, /*fail_at=*/23);
    DataLoader loader(ds, {.batch_size = 5, .shuffle = false, .num_workers = workers});
    loader.begin_epoch(0);
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(loader.next().has_value()) << k;
    try {
      loader.next();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sample 23 is unreadable"), std::string::npos);
    }
    EXPECT_FALSE(loader.next().has_value());  // the failed epoch is over
    loader.begin_epoch(1);  // a new epoch runs again (and fails again at sample 23)
    EXPECT_THROW(while (loader.next()){}, Error);
  }
  EXPECT_THROW(DataLoader(std::make_shared<IndexDataset>(5), {.batch_size = 0}), Error);
  EXPECT_THROW(DataLoader(std::make_shared<IndexDataset>(5), {.prefetch = 0}), Error);
}

// Note [Sharding an epoch across ranks]: four ranks over 103 samples each visit 26 (the order
// padded by its first sample), in as many batches, together every sample of the epoch once but
// the first, which two ranks see; a rank's batches are its shard of the shared permutation,
// whatever its worker count, and the next epoch reshuffles them all alike.
TEST(DataLoader, RanksShareOnePermutationAndVisitEqualShards) {
  auto ds = std::make_shared<IndexDataset>(103);
  const std::vector<int64_t> whole = epoch_permutation(103, 9, 2, true);
  std::vector<int64_t> seen;
  for (int64_t rank = 0; rank < 4; ++rank) {
    DataLoader loader(ds, {.batch_size = 8,
                           .num_workers = static_cast<int>(rank % 2) * 2,
                           .seed = 9,
                           .rank = rank,
                           .world_size = 4});
    EXPECT_EQ(loader.batches_per_epoch(), 4);  // 26 samples: 3 of 8 and one of 2
    std::vector<int64_t> ids = flatten(run_epoch(loader, 2));
    ASSERT_EQ(ids.size(), 26u);
    EXPECT_EQ(ids, loader.epoch_order(2));
    for (size_t k = 0; k < ids.size(); ++k) {
      EXPECT_EQ(ids[k], whole[(static_cast<size_t>(rank) + 4 * k) % 103]) << "rank " << rank;
    }
    EXPECT_NE(loader.epoch_order(3), ids) << "the next epoch reshuffles";
    // Only rank 3's last sample (position 103) is padding, and it comes last.
    EXPECT_EQ(loader.unpadded_samples(), rank == 3 ? 25 : 26) << "rank " << rank;
    seen.insert(seen.end(), ids.begin(), ids.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> want(103);
  std::iota(want.begin(), want.end(), int64_t{0});
  want.push_back(whole[0]);  // the padding: position 103 wraps to the order's start
  std::sort(want.begin(), want.end());
  EXPECT_EQ(seen, want);
  // drop_last then drops each rank's last partial batch alike.
  DataLoader drop(ds, {.batch_size = 8, .drop_last = true, .rank = 3, .world_size = 4});
  EXPECT_EQ(drop.batches_per_epoch(), 3);
  EXPECT_THROW(DataLoader(ds, {.rank = 4, .world_size = 4}), Error);
  EXPECT_THROW(DataLoader(ds, {.rank = 0, .world_size = 0}), Error);
  EXPECT_EQ(shard_size(0, 4), 0);
  EXPECT_TRUE(rank_shard({}, 1, 4).empty());
  // Every n and world: the unpadded parts add up to n once, and each is the count of its shard's
  // positions below n, which come first.
  for (int64_t n : {0, 1, 3, 7, 8, 103}) {
    for (int64_t world : {1, 2, 3, 4, 8, 9}) {
      int64_t total = 0;
      for (int64_t rank = 0; rank < world; ++rank) {
        const int64_t unpadded = shard_unpadded_size(n, rank, world);
        for (int64_t k = 0; k < shard_size(n, world); ++k) {
          EXPECT_EQ(rank + k * world < n, k < unpadded) << n << " " << world << " " << rank;
        }
        total += unpadded;
      }
      EXPECT_EQ(total, n) << n << " on " << world;
    }
  }
  EXPECT_THROW(shard_unpadded_size(5, 4, 4), Error);
}

// What a prediction leaves room for: the staged batch exists with the copy stream on a CUDA
// device only, images f32 and labels i64, each rounded as the device allocator rounds.
TEST(Loader, StagedDeviceBytesAreOneRoundedBatchOnACopyStream) {
  const Shape sample{5, 5, 3};  // 300 bytes of f32 an image
  data::LoaderOptions o{.batch_size = 3, .device = Device::cuda(0)};
  EXPECT_EQ(data::staged_device_bytes(o, sample), 1024 + 512);  // 900 -> 1024, 24 -> 512
  o.copy_stream = false;
  EXPECT_EQ(data::staged_device_bytes(o, sample), 0);
  o = {.batch_size = 3};
  EXPECT_EQ(data::staged_device_bytes(o, sample), 0);  // the CPU: batches are host tensors
}
