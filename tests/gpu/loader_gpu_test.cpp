// The CUDA DataLoader against the CPU one, bit for bit, with and without its copy stream: two
// epochs, an interrupted one, destruction mid-epoch and a worker error, while long GPU work is
// queued between next() calls and each batch is freed with kernels still reading it (the cases
// the cross-stream events of Note [Loader host copies] exist for).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/ops.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "gpu_test_util.h"
#include "memory/caching_allocator.h"
#include "memory/cuda_allocators.h"

using namespace frugal;
using namespace frugal::data;

namespace {

const Device kGpu = Device::cuda(0);

// SyntheticDataset that throws at one sample, like an unreadable file.
class FailingDataset : public Dataset {
 public:
  FailingDataset(std::shared_ptr<const Dataset> inner, int64_t fail_at)
      : inner_(std::move(inner)), fail_at_(fail_at) {}
  int64_t size() const override { return inner_->size(); }
  Shape sample_shape() const override { return inner_->sample_shape(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  void get(int64_t i, float* image, int64_t* label) const override {
    FRUGAL_CHECK(i != fail_at_, "FailingDataset: sample ", i, " is unreadable");
    inner_->get(i, image, label);
  }

 private:
  std::shared_ptr<const Dataset> inner_;
  int64_t fail_at_;
};

std::vector<uint8_t> bytes_of(const Tensor& t) {  // a CPU tensor's bytes
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

std::vector<uint8_t> download(const Tensor& t) { return bytes_of(t.to(Device::cpu())); }

// What the GPU side saw of one batch; compared at the end of the epoch, so that no host sync
// happens between next() calls while it runs.
struct Seen {
  int64_t index = 0;
  Tensor early_images, early_labels;  // cloned on the compute stream right after next()
  Tensor late_images;                 // cloned behind long work, after the batch was freed
  std::vector<uint8_t> cpu_images, cpu_labels;
};

// Long GPU work on the compute stream (a few ms of f32 matmuls), queued without a host sync.
class LongWork {
 public:
  LongWork() {
    Generator gen(11);
    a_ = randn({2048, 2048}, gen, {.device = kGpu}, 0.0, 0.02);
  }
  void queue(int reps) {
    Tensor x = a_;
    for (int r = 0; r < reps; ++r) x = matmul(x, a_);
    sink_ = x;  // freed by the next queue(): its block is reused while queued work runs
  }
  void release() { sink_ = Tensor(); }

 private:
  Tensor a_, sink_;
};

// Runs the loaders side by side for up to `max_batches` batches of the current epoch, GPU work
// queued in between; checks every batch bit for bit. Returns the number of batches seen.
int64_t compare_epoch(DataLoader& gpu, DataLoader& cpu, LongWork& work, int64_t max_batches,
                      const std::string& what) {
  // No cached blocks from earlier runs: the next staged batch then gets exactly the blocks of the
  // batch freed just before it, the case the copy stream's wait on the compute stream is for.
  kernels::cuda::synchronize(kGpu);
  memory::allocator_for(kGpu).empty_cache();
  std::vector<Seen> seen;
  while (static_cast<int64_t>(seen.size()) < max_batches) {
    std::optional<Batch> g = gpu.next();
    std::optional<Batch> c = cpu.next();
    EXPECT_EQ(g.has_value(), c.has_value()) << what << " batch " << seen.size();
    if (!g || !c) break;
    EXPECT_EQ(g->images.device(), kGpu);
    EXPECT_EQ(g->labels.device(), kGpu);
    Seen s;
    s.index = g->index;
    EXPECT_EQ(g->index, c->index) << what;
    EXPECT_EQ(g->images.shape(), c->images.shape()) << what << " batch " << c->index;
    s.early_images = g->images.clone();  // must see the finished copy (compute waits for it)
    s.early_labels = g->labels.clone();
    // Every other step is long, so that the next copies are issued while it still runs; the
    // steps between are empty, so that the compute stream reaches a batch's clone right when the
    // long step before has ended and its copy (which waited for that step) has just begun.
    work.queue(c->index % 2 == 0 ? 24 : 0);
    s.late_images = g->images.clone();  // must not see a later batch copied into freed blocks
    s.cpu_images = bytes_of(c->images);
    s.cpu_labels = bytes_of(c->labels);
    g.reset();  // freed on the host while the clone above is still queued
    seen.push_back(std::move(s));
  }
  for (const Seen& s : seen) {
    const std::string at = what + " batch " + std::to_string(s.index);
    EXPECT_TRUE(download(s.early_images) == s.cpu_images) << at << ": images differ";
    EXPECT_TRUE(download(s.early_labels) == s.cpu_labels) << at << ": labels differ";
    EXPECT_TRUE(download(s.late_images) == s.cpu_images)
        << at << ": images changed while a queued kernel still read them";
  }
  return static_cast<int64_t>(seen.size());
}

int64_t device_allocated() { return memory::allocator_for(kGpu).stats().allocated_bytes.current; }
int64_t pinned_allocated() {
  return memory::pinned_host_allocator().stats().allocated_bytes.current;
}

struct Config {
  bool copy_stream;
  int workers;
  std::string name() const {
    return std::string(copy_stream ? "copy stream" : "compute stream") + ", " +
           std::to_string(workers) + " workers";
  }
};
const Config kConfigs[] = {{true, 0}, {true, 3}, {false, 0}, {false, 3}};

// 45x37x3 f32 samples, 48 a batch (~1 MB, the caching allocator's small pool), 7 batches and a
// short one: odd sizes, noisy values.
std::shared_ptr<const Dataset> dataset() {
  return std::make_shared<SyntheticDataset>(Shape{45, 37, 3}, 10, 48 * 7 + 13, 29);
}

LoaderOptions options(const Config& cfg, Device device) {
  return {.batch_size = 48,
          .shuffle = true,
          .num_workers = cfg.workers,
          .prefetch = 2,
          .seed = 4,
          .transforms = make_random_horizontal_flip(),
          .device = device,
          .copy_stream = cfg.copy_stream};
}

}  // namespace

TEST(LoaderGpu, BatchesMatchTheCpuLoaderBitForBit) {
  SKIP_WITHOUT_GPU();
  auto ds = dataset();
  LongWork work;
  work.queue(1);  // cuBLAS's workspace is allocated once, before the counts below
  work.release();
  for (const Config& cfg : kConfigs) {
    const int64_t dev_before = device_allocated(), pinned_before = pinned_allocated();
    {
      DataLoader gpu(ds, options(cfg, kGpu));
      DataLoader cpu(ds, options(cfg, Device::cpu()));
      for (int64_t e = 0; e < 2; ++e) {
        gpu.begin_epoch(e);
        cpu.begin_epoch(e);
        EXPECT_EQ(compare_epoch(gpu, cpu, work, 1000, cfg.name() + " epoch " + std::to_string(e)),
                  8);
        EXPECT_FALSE(gpu.next().has_value());
      }
      // Interrupted: three batches of epoch 2 (one more staged behind them), then epoch 3 anew.
      gpu.begin_epoch(2);
      cpu.begin_epoch(2);
      EXPECT_EQ(compare_epoch(gpu, cpu, work, 3, cfg.name() + " epoch 2"), 3);
      work.queue(24);  // the dropped staged batch is freed while this runs
      gpu.begin_epoch(3);
      cpu.begin_epoch(3);
      EXPECT_EQ(compare_epoch(gpu, cpu, work, 1000, cfg.name() + " epoch 3"), 8);
      // Destroyed mid-epoch with a batch staged and long work queued.
      gpu.begin_epoch(4);
      cpu.begin_epoch(4);
      EXPECT_EQ(compare_epoch(gpu, cpu, work, 2, cfg.name() + " epoch 4"), 2);
      work.queue(24);
    }
    work.release();
    kernels::cuda::synchronize(kGpu);
    EXPECT_EQ(pinned_allocated(), pinned_before) << cfg.name() << ": pinned buffers leaked";
    EXPECT_EQ(device_allocated(), dev_before) << cfg.name() << ": device batches leaked";
  }
}

TEST(LoaderGpu, WorkerErrorsReachTheConsumerAtTheirBatch) {
  SKIP_WITHOUT_GPU();
  auto ds = std::make_shared<FailingDataset>(
      std::make_shared<SyntheticDataset>(Shape{5, 3, 2}, 4, 50, 3), /*fail_at=*/23);
  for (const Config& cfg : kConfigs) {
    const int64_t pinned_before = pinned_allocated();
    {
      DataLoader loader(ds, {.batch_size = 5,
                             .shuffle = false,
                             .num_workers = cfg.workers,
                             .device = kGpu,
                             .copy_stream = cfg.copy_stream});
      DataLoader cpu(ds, {.batch_size = 5, .shuffle = false, .num_workers = cfg.workers});
      for (int64_t e = 0; e < 2; ++e) {
        loader.begin_epoch(e);
        cpu.begin_epoch(e);
        for (int k = 0; k < 4; ++k) {
          std::optional<Batch> g = loader.next();
          std::optional<Batch> c = cpu.next();
          ASSERT_TRUE(g.has_value()) << cfg.name() << " batch " << k;
          EXPECT_EQ(g->index, k);
          EXPECT_TRUE(download(g->images) == bytes_of(c->images)) << cfg.name() << " batch " << k;
          EXPECT_TRUE(download(g->labels) == bytes_of(c->labels)) << cfg.name() << " batch " << k;
        }
        try {
          loader.next();
          ADD_FAILURE() << cfg.name() << ": no error";
        } catch (const Error& err) {
          EXPECT_NE(std::string(err.what()).find("sample 23 is unreadable"), std::string::npos)
              << err.what();
        }
        EXPECT_FALSE(loader.next().has_value()) << cfg.name() << ": the failed epoch is over";
      }
      // A fresh epoch after the error still yields correct batches.
      loader.begin_epoch(7);
      cpu.begin_epoch(7);
      std::optional<Batch> g = loader.next();
      std::optional<Batch> c = cpu.next();
      ASSERT_TRUE(g.has_value() && c.has_value());
      EXPECT_TRUE(download(g->images) == bytes_of(c->images)) << cfg.name();
    }
    EXPECT_EQ(pinned_allocated(), pinned_before) << cfg.name() << ": pinned buffers leaked";
  }
}

// A batch above the small pool takes a segment of its own 2 MiB-rounded size, which each later
// batch of that size reuses, not a 20 MiB one whose rest would stay cached beside it; staged on
// the copy stream or copied on the compute stream alike.
TEST(LoaderGpu, BatchesAboveTheSmallPoolGetSegmentsOfTheirOwnSize) {
  SKIP_WITHOUT_GPU();
  auto ds = std::make_shared<SyntheticDataset>(Shape{32, 32, 3}, 10, 256 * 5, 3);  // 3 MiB each
  auto& alloc = dynamic_cast<memory::CachingAllocator&>(memory::allocator_for(kGpu));
  for (bool copy_stream : {true, false}) {
    kernels::cuda::synchronize(kGpu);
    alloc.empty_cache();
    const int64_t reserved_before = alloc.stats().reserved_bytes.current;
    DataLoader gpu(ds, {.batch_size = 256, .seed = 1, .device = kGpu, .copy_stream = copy_stream});
    gpu.begin_epoch(0);
    int64_t batches = 0;
    while (std::optional<Batch> b = gpu.next()) {
      const auto addr = reinterpret_cast<uintptr_t>(b->images.data_ptr());
      int holders = 0;
      for (const memory::SegmentSnapshot& seg : alloc.snapshot()) {
        if (addr < seg.address || addr >= seg.address + seg.size) continue;
        ++holders;
        EXPECT_EQ(seg.size, size_t{4} << 20)
            << "copy stream " << copy_stream << ", batch " << b->index << ": 3 MiB of images";
      }
      EXPECT_EQ(holders, 1) << "batch " << b->index;
      ++batches;
    }
    EXPECT_EQ(batches, 5);
    // The batch handed over, the one staged, one freed while its copy may still be read, and
    // the labels' small segment.
    EXPECT_LE(alloc.stats().reserved_bytes.current - reserved_before,
              int64_t{3} * (4 << 20) + (2 << 20))
        << "copy stream " << copy_stream;
  }
}
