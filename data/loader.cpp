// DataLoader internals: one mutex guards the epoch plan, the claim counter and the map of built
// batches; workers claim batch numbers in order but at most `prefetch` ahead of the consumer, so
// at most `prefetch` batches are ever built and waiting. Stale work (a restarted or aborted epoch,
// or shutdown) is recognised by its generation number and dropped, returning its buffers. On CUDA
// with a copy stream, next() also stages the batch after the one it returns (CopyStager).
#include "data/loader.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "data/buffer_pool.h"
#include "data/copy_event.h"
#include "data/copy_stager.h"
#include "data/shuffle.h"
#include "kernels/elementwise.h"
#include "kernels/random.h"
#include "memory/cuda_allocators.h"
#include "memory/rounding.h"

namespace frugal::data {
namespace {

struct EpochPlan {
  uint64_t generation = 0;
  int64_t epoch = 0;
  std::vector<int64_t> order;
  int64_t num_batches = 0;
  uint64_t transform_seed = 0;
};

struct HostBatch {
  PooledBuffer images;  // [N, H, W, C] f32
  PooledBuffer labels;  // [N] i64
  int64_t n = 0;
};

struct Built {
  HostBatch batch;
  std::exception_ptr error;
};

// A batch taken off the epoch plan for the consumer (built, or failed to build).
struct Taken {
  std::shared_ptr<const EpochPlan> plan;
  int64_t k = 0;
  Built built;
};

}  // namespace

struct DataLoader::Impl {
  std::shared_ptr<const Dataset> dataset;
  LoaderOptions opts;
  Shape in_shape, out_shape;  // [H, W, C] before / after the transforms
  int64_t num_batches = 0;
  std::shared_ptr<BufferPool> image_pool, label_pool;

  // This rank's part of the epoch's permutation (Note [Sharding an epoch across ranks]).
  std::vector<int64_t> epoch_order(int64_t epoch) const {
    std::vector<int64_t> order = epoch_permutation(dataset->size(), opts.seed, epoch, opts.shuffle);
    if (opts.world_size == 1) return order;
    return rank_shard(order, opts.rank, opts.world_size);
  }
  std::vector<float> scratch;  // the calling thread's, when num_workers == 0

  std::mutex mu;
  std::condition_variable work_cv, ready_cv;
  std::shared_ptr<const EpochPlan> plan;  // null before the first begin_epoch
  std::atomic<uint64_t> generation{0};
  bool stop = false;
  int64_t next_claim = 0;  // next batch number a worker may build
  int64_t delivered = 0;   // batches handed to the consumer this epoch
  std::map<int64_t, Built> ready;
  std::vector<std::thread> workers;

  // CUDA, copy_stream off: the previous batch's pinned buffers stay on loan until its copy (on
  // the compute stream) has finished.
  CopyEvent copy_done;
  HostBatch in_flight;
  // CUDA, copy_stream on: the batch after the last one handed over, copied ahead.
  std::unique_ptr<CopyStager> stager;

  // Fills batch k of `plan`; returns false when the plan went stale midway.
  bool build(const EpochPlan& p, int64_t k, HostBatch& out, std::vector<float>& tmp) {
    const int64_t b = opts.batch_size;
    const int64_t first = k * b;
    const int64_t n = std::min<int64_t>(b, static_cast<int64_t>(p.order.size()) - first);
    out.images = image_pool->acquire();
    out.labels = label_pool->acquire();
    out.n = n;
    const int64_t in_numel = in_shape.numel(), out_numel = out_shape.numel();
    float* images = out.images.as<float>();
    int64_t* labels = out.labels.as<int64_t>();
    for (int64_t j = 0; j < n; ++j) {
      if (generation.load(std::memory_order_relaxed) != p.generation) return false;
      const int64_t idx = p.order[static_cast<size_t>(first + j)];
      float* dst = images + j * out_numel;
      if (!opts.transforms) {
        dataset->get(idx, dst, &labels[j]);
      } else {
        tmp.resize(static_cast<size_t>(in_numel));
        dataset->get(idx, tmp.data(), &labels[j]);
        Shape s = in_shape;
        SampleRng rng(sample_seed(p.transform_seed, idx));
        opts.transforms->apply(tmp, s, rng);
        FRUGAL_CHECK(s == out_shape && static_cast<int64_t>(tmp.size()) == out_numel,
                     "DataLoader: sample ", idx, " transformed to ", s, ", expected ", out_shape);
        std::copy(tmp.begin(), tmp.end(), dst);
      }
      FRUGAL_CHECK(labels[j] >= 0 && labels[j] < dataset->num_classes(), "DataLoader: sample ", idx,
                   " has label ", labels[j], " outside [0, ", dataset->num_classes(), ")");
    }
    return true;
  }

  // Stops the epoch and joins every worker started (the destructor, or a failed constructor).
  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      abort_epoch_locked();
    }
    work_cv.notify_all();
    for (std::thread& t : workers) t.join();
    workers.clear();
  }

  void worker_loop() {
    std::vector<float> tmp;
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      work_cv.wait(lock, [&] {
        return stop ||
               (plan && next_claim < plan->num_batches && next_claim < delivered + opts.prefetch);
      });
      if (stop) return;
      std::shared_ptr<const EpochPlan> p = plan;
      const int64_t k = next_claim++;
      lock.unlock();
      Built built;
      bool fresh = true;
      try {
        fresh = build(*p, k, built.batch, tmp);
      } catch (...) {
        built.error = std::current_exception();
      }
      lock.lock();
      if (fresh && p->generation == generation.load()) {
        ready.emplace(k, std::move(built));
        ready_cv.notify_all();
      } else {
        lock.unlock();  // stale: its buffers go back to the pool outside the lock
        built = Built{};
        lock.lock();
      }
    }
  }

  // Ends the current epoch early: workers stop claiming, stale results are dropped.
  void abort_epoch_locked() {
    generation.fetch_add(1);
    plan.reset();
    ready.clear();
  }

  Batch to_batch(HostBatch hb, int64_t k) {
    const Shape image_shape{hb.n, out_shape[0], out_shape[1], out_shape[2]};
    if (!opts.device.is_cuda()) {
      Batch b{wrap_pooled(std::move(hb.images), image_shape, DType::f32),
              wrap_pooled(std::move(hb.labels), {hb.n}, DType::i64), k};
      return b;
    }
    // Note [Loader host copies] in loader.h.
    copy_done.wait();
    in_flight = HostBatch{};
    auto [images, labels] = empty_device_batch(image_shape, opts.device);
    Batch b{std::move(images), std::move(labels), k};
    kernels::Context ctx = kernels::Context::of(opts.device);
    kernels::copy_bytes(ctx, opts.device, b.images.data_ptr(), Device::cpu(), hb.images.get(),
                        b.images.nbytes());
    kernels::copy_bytes(ctx, opts.device, b.labels.data_ptr(), Device::cpu(), hb.labels.get(),
                        b.labels.nbytes());
    copy_done.record(ctx);
    in_flight = std::move(hb);
    return b;
  }

  // Takes the next batch of the epoch off the plan: from the workers (waiting for it when `wait`,
  // else only when it is built already), or built here when num_workers == 0. False when the
  // epoch has no batch left (or, without `wait`, the next one is not built yet).
  bool take(bool wait, Taken& out) {
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!plan || delivered >= plan->num_batches) return false;
      out.plan = plan;
      out.k = delivered;
      if (!workers.empty()) {
        if (!wait && ready.count(out.k) == 0) return false;
        ready_cv.wait(lock, [&] { return ready.count(out.k) != 0; });
        out.built = std::move(ready.at(out.k));
        ready.erase(out.k);
      }
      delivered++;
      if (delivered >= out.plan->num_batches) plan.reset();  // epoch over: workers idle
    }
    work_cv.notify_all();
    if (workers.empty()) {
      try {
        build(*out.plan, out.k, out.built.batch, scratch);
      } catch (...) {
        out.built.error = std::current_exception();
      }
    }
    return true;
  }

  // A failed batch ends its epoch (unless a newer epoch has begun) and is rethrown.
  [[noreturn]] void fail_epoch(uint64_t plan_generation, std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (plan && plan->generation == plan_generation) abort_epoch_locked();
    }
    std::rethrow_exception(error);
  }

  // Stages a taken batch; a failure to stage it (device out of memory) becomes that batch's error,
  // so the consumer meets it at the batch it belongs to.
  void stage(Taken t) {
    if (!t.built.error) {
      HostBatch& hb = t.built.batch;
      try {
        stager->stage(t.k, t.plan->generation, std::move(hb.images), std::move(hb.labels),
                      {hb.n, out_shape[0], out_shape[1], out_shape[2]});
        return;
      } catch (...) {
        t.built.error = std::current_exception();
      }
    }
    stager->stage_error(t.k, t.plan->generation, std::move(t.built.error));
  }

  // next() with a copy stream: hands over the staged batch and stages the one after it, so that
  // its copy runs while the consumer's step on this one computes. Note [Loader host copies].
  std::optional<Batch> next_staged() {
    if (!stager->staged()) {  // an epoch's first batch, or the workers were behind
      Taken t;
      if (!take(/*wait=*/true, t)) return std::nullopt;
      stage(std::move(t));
    }
    if (std::exception_ptr error = stager->staged_error()) {
      const uint64_t generation = stager->staged_generation();
      stager->drop();
      fail_epoch(generation, error);
    }
    CopyStager::Taken handed = stager->take();
    // Without workers the next batch is built here (the same work per call as without staging);
    // with workers it is staged only when already built, so next() never waits for it.
    Taken t;
    if (take(/*wait=*/workers.empty(), t)) stage(std::move(t));
    return Batch{std::move(handed.images), std::move(handed.labels), handed.index};
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  FRUGAL_CHECK(dataset != nullptr, "DataLoader: null dataset");
  FRUGAL_CHECK(options.batch_size >= 1, "DataLoader: batch_size ", options.batch_size,
               " must be >= 1");
  FRUGAL_CHECK(options.num_workers >= 0, "DataLoader: negative num_workers ", options.num_workers);
  FRUGAL_CHECK(options.prefetch >= 1, "DataLoader: prefetch ", options.prefetch, " must be >= 1");
  FRUGAL_CHECK(options.device.is_cpu() || options.device.is_cuda(),
               "DataLoader: batches go to the CPU or a CUDA device, not ", options.device);
  FRUGAL_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
               "DataLoader: rank ", options.rank, " is not in [0, world_size=", options.world_size,
               ")");
  m.dataset = std::move(dataset);
  m.opts = std::move(options);
  m.in_shape = m.dataset->sample_shape();
  FRUGAL_CHECK(m.in_shape.ndim() == 3, "DataLoader: dataset samples must be [H, W, C], got ",
               m.in_shape);
  m.out_shape = m.opts.transforms ? m.opts.transforms->output_shape(m.in_shape) : m.in_shape;
  const int64_t n = shard_size(m.dataset->size(), m.opts.world_size), b = m.opts.batch_size;
  m.num_batches = m.opts.drop_last ? n / b : (n + b - 1) / b;

  // Buffers on loan at once: `prefetch` built ahead, one being built by the calling thread
  // (num_workers == 0) or delivered, one held by the consumer and one in a CUDA copy. A batch
  // holds at most the shard's n rows: a batch size past the data (a mistyped --batch) must not
  // allocate, or pin, `keep` buffers of it before the caller can say it is too large.
  const int64_t keep = m.opts.prefetch + 3;
  const int64_t rows = std::max<int64_t>(std::min(b, n), 1);
  memory::Allocator& host =
      m.opts.device.is_cuda() ? memory::pinned_host_allocator() : memory::cpu_allocator();
  m.image_pool = BufferPool::create(
      host, static_cast<size_t>(rows * m.out_shape.numel()) * sizeof(float), keep);
  m.label_pool = BufferPool::create(host, static_cast<size_t>(rows) * sizeof(int64_t), keep);
  if (m.opts.device.is_cuda() && m.opts.copy_stream) {
    m.stager = std::make_unique<CopyStager>(m.opts.device);
  }
  try {
    for (int i = 0; i < m.opts.num_workers; ++i) m.workers.emplace_back([&m] { m.worker_loop(); });
  } catch (...) {
    // A worker the system refused (std::system_error) unwinds this constructor, and destroying
    // the workers already running would call std::terminate: they are stopped and joined first.
    m.stop_workers();
    throw;
  }
}

DataLoader::~DataLoader() {
  impl_->stop_workers();
  impl_->stager.reset();  // drains: the staged batch is dropped, every pending copy waited for
  try {
    impl_->copy_done.wait();
  } catch (const std::exception&) {
    // A failed device cannot be helped here; the buffers are released below either way.
  }
}

void DataLoader::begin_epoch(int64_t epoch) {
  Impl& m = *impl_;
  auto p = std::make_shared<EpochPlan>();
  p->epoch = epoch;
  p->order = m.epoch_order(epoch);
  p->num_batches = m.num_batches;
  p->transform_seed =
      kernels::mix64(kernels::mix64(m.opts.seed ^ 0x7472616e73ull) + static_cast<uint64_t>(epoch));
  if (m.stager) m.stager->drop();  // a staged batch of the old epoch
  std::map<int64_t, Built> dropped;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.abort_epoch_locked();
    p->generation = m.generation.load();
    m.plan = std::move(p);
    m.next_claim = 0;
    m.delivered = 0;
    dropped.swap(m.ready);
  }
  m.work_cv.notify_all();
}

std::optional<Batch> DataLoader::next() {
  Impl& m = *impl_;
  if (m.stager) return m.next_staged();
  Taken t;
  if (!m.take(/*wait=*/true, t)) return std::nullopt;
  if (t.built.error) m.fail_epoch(t.plan->generation, t.built.error);
  return m.to_batch(std::move(t.built.batch), t.k);
}

int64_t DataLoader::batches_per_epoch() const { return impl_->num_batches; }

int64_t DataLoader::unpadded_samples() const {
  return shard_unpadded_size(impl_->dataset->size(), impl_->opts.rank, impl_->opts.world_size);
}

int64_t staged_device_bytes(const LoaderOptions& o, const Shape& sample_shape) {
  if (!o.device.is_cuda() || !o.copy_stream) return 0;
  std::vector<int64_t> images{o.batch_size};
  images.insert(images.end(), sample_shape.dims().begin(), sample_shape.dims().end());
  const char* op = "staged_device_bytes";
  return static_cast<int64_t>(
      memory::round_request(checked_nbytes(Shape(images), dtype_size(DType::f32), op)) +
      memory::round_request(checked_nbytes(Shape{o.batch_size}, dtype_size(DType::i64), op)));
}

Shape DataLoader::sample_shape() const { return impl_->out_shape; }

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  return impl_->epoch_order(epoch);
}

}  // namespace frugal::data
