// Does the CUDA DataLoader's copy stream overlap host-to-device copies with compute? Times K
// iterations of {next(); fixed GPU work on the batch (a sum, then f32 matmuls on the compute
// stream)} with LoaderOptions::copy_stream on and off, beside the parts alone: the raw H2D copy of
// one batch, the GPU work alone, the loader alone (both paths) and the host building alone (a CPU
// loader). Overlap shows as overlapped ~ max(copy, work) against serial ~ copy + work, as long as
// the host builds batches faster than either (host_only_ms). The dataset is cheap on purpose
// (each sample a memcpy of one of 8 random images), so that the workers keep up.
//
//   loader_overlap_bench --batch 256 --input 3x224x224 --iters 20 [--work-ms 0] [--json]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "bench/bench_common.h"
#include "core/factory.h"
#include "core/ops.h"
#include "data/copy_event.h"
#include "data/loader.h"
#include "kernels/elementwise.h"
#include "memory/cuda_allocators.h"

#ifdef FRUGAL_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace frugal::bench {
namespace {

constexpr const char* kUsage =
    "usage: loader_overlap_bench [--batch 256] [--input 3x224x224] [--iters 20] [--warmup 3]\n"
    "         [--workers N] [--prefetch 4] [--matmul 4096] [--work-ms X] [--json]\n"
    "  --work-ms: GPU work per iteration (0: as long as one batch's H2D copy)\n";

// Sample i: one of 8 fixed random images, label i % 10. get() is a memcpy.
class CheapDataset : public data::Dataset {
 public:
  CheapDataset(Shape shape, int64_t size) : shape_(shape), size_(size) {
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    images_.resize(8 * static_cast<size_t>(shape.numel()));
    for (float& v : images_) v = dist(gen);
  }
  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return 10; }
  void get(int64_t i, float* image, int64_t* label) const override {
    const size_t n = static_cast<size_t>(shape_.numel());
    std::memcpy(image, images_.data() + static_cast<size_t>(i % 8) * n, n * sizeof(float));
    *label = i % 10;
  }

 private:
  Shape shape_;
  int64_t size_;
  std::vector<float> images_;
};

using Clock = std::chrono::steady_clock;

#ifdef FRUGAL_WITH_CUDA
const Device kGpu = Device::cuda(0);

void sync() { kernels::cuda::synchronize(kGpu); }

// ms per iteration of `body` over `iters` iterations after `warmup`, the GPU idle at both ends.
template <typename F>
double time_ms(int64_t warmup, int64_t iters, F&& body) {
  for (int64_t i = 0; i < warmup; ++i) body();
  sync();
  auto t0 = Clock::now();
  for (int64_t i = 0; i < iters; ++i) body();
  sync();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() /
         static_cast<double>(iters);
}

// The GPU work of one iteration: a sum over the batch (so the work depends on it) and `reps`
// chained f32 matmuls of [n, n].
struct Work {
  Tensor a;
  int64_t reps = 1;
  Tensor run(const Tensor& images) const {
    Tensor s = sum(images);
    Tensor x = a;
    for (int64_t r = 0; r < reps; ++r) x = matmul(x, a);
    return s;
  }
};

int run(int argc, char** argv) {
  Flags flags(argc, argv,
              {"batch", "input", "iters", "warmup", "workers", "prefetch", "matmul", "work-ms"},
              {"json", "help"});
  if (flags.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (kernels::cuda_device_count() == 0) {
    std::cerr << "loader_overlap_bench: no CUDA device\n";
    return 1;
  }
  const int64_t batch = flags.integer("batch", 256, 1);
  const std::vector<int64_t> chw = parse_chw(flags.str("input", "3x224x224"));
  const int64_t iters = flags.integer("iters", 20, 1), warmup = flags.integer("warmup", 3, 0);
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t workers = flags.integer("workers", std::clamp<int64_t>(hw - 2, 1, 12), 1);
  const int64_t prefetch = flags.integer("prefetch", 4, 1);
  const int64_t n = flags.integer("matmul", 4096, 16);
  const Shape sample{chw[1], chw[2], chw[0]};  // [H, W, C]
  const int64_t batches = warmup + iters + 1;
  auto ds = std::make_shared<CheapDataset>(sample, batch * batches);
  auto options = [&](Device device, bool copy_stream) {
    return data::LoaderOptions{.batch_size = batch,
                               .shuffle = true,
                               .num_workers = static_cast<int>(workers),
                               .prefetch = static_cast<int>(prefetch),
                               .seed = 1,
                               .device = device,
                               .copy_stream = copy_stream};
  };

  // Raw H2D copy of one batch from pinned memory on the copy stream.
  const size_t bytes = static_cast<size_t>(batch * sample.numel()) * sizeof(float);
  double h2d_ms = 0;
  {
    memory::DataPtr host = memory::pinned_host_allocator().allocate(bytes);
    std::memset(host.get(), 0, bytes);
    Tensor dev = Tensor::empty({batch, sample[0], sample[1], sample[2]}, {DType::f32, kGpu});
    const kernels::Context copy = data::copy_context(kGpu);
    h2d_ms = time_ms(warmup, iters, [&] {
      kernels::copy_bytes(copy, kGpu, dev.data_ptr(), Device::cpu(), host.get(), bytes);
    });
  }

  // GPU work calibrated to --work-ms (default: the copy time), whole matmuls.
  Generator gen(3);
  Work work{randn({n, n}, gen, {.device = kGpu}, 0.0, 1.0 / static_cast<double>(n)), 1};
  Tensor probe = zeros({batch, sample[0], sample[1], sample[2]}, {.device = kGpu});
  const double one_matmul_ms = time_ms(2, 5, [&] { work.run(probe); });
  const double target_ms =
      flags.str("work-ms", "0") == "0" ? h2d_ms : std::stod(flags.str("work-ms", "0"));
  work.reps = std::max<int64_t>(1, std::llround(target_ms / one_matmul_ms));
  const double compute_only_ms = time_ms(warmup, iters, [&] { work.run(probe); });
  probe = Tensor();

  // The loader alone (GPU or CPU), and the loader with the work.
  auto loader_ms = [&](Device device, bool copy_stream, bool with_work) {
    data::DataLoader loader(ds, options(device, copy_stream));
    loader.begin_epoch(0);
    Tensor keep;  // the last sum, so that nothing is optimised away
    const double ms = time_ms(warmup, iters, [&] {
      std::optional<data::Batch> b = loader.next();
      if (b && with_work) keep = work.run(b->images);
    });
    return ms;
  };
  const double host_only_ms = loader_ms(Device::cpu(), false, false);
  const double loader_copy_stream_ms = loader_ms(kGpu, true, false);
  const double loader_compute_stream_ms = loader_ms(kGpu, false, false);
  const double serial_ms = loader_ms(kGpu, false, true);
  const double overlapped_ms = loader_ms(kGpu, true, true);

  nlohmann::json j = {
      {"bench", "loader_overlap"},
      {"batch", batch},
      {"input", flags.str("input", "3x224x224")},
      {"batch_mib", static_cast<double>(bytes) / (1 << 20)},
      {"workers", workers},
      {"prefetch", prefetch},
      {"iters", iters},
      {"matmul_n", n},
      {"matmul_reps", work.reps},
      {"h2d_copy_ms", h2d_ms},
      {"h2d_gb_per_s", static_cast<double>(bytes) / (h2d_ms * 1e6)},
      {"compute_only_ms", compute_only_ms},
      {"host_only_ms", host_only_ms},
      {"loader_only_copy_stream_ms", loader_copy_stream_ms},
      {"loader_only_compute_stream_ms", loader_compute_stream_ms},
      {"serial_ms", serial_ms},
      {"overlapped_ms", overlapped_ms},
      {"ideal_serial_ms", h2d_ms + compute_only_ms},
      {"ideal_overlapped_ms", std::max(h2d_ms, compute_only_ms)},
      {"speedup", serial_ms / overlapped_ms},
  };
  if (flags.flag("json")) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("batch %lld x %s (%.0f MiB), %lld workers, %lld iterations\n",
              static_cast<long long>(batch), flags.str("input", "3x224x224").c_str(),
              static_cast<double>(bytes) / (1 << 20), static_cast<long long>(workers),
              static_cast<long long>(iters));
  std::printf("  H2D copy of one batch        %8.2f ms (%.1f GB/s)\n", h2d_ms,
              j["h2d_gb_per_s"].get<double>());
  std::printf("  GPU work alone (%lld x matmul %lld) %8.2f ms\n", static_cast<long long>(work.reps),
              static_cast<long long>(n), compute_only_ms);
  std::printf("  host building alone (CPU)    %8.2f ms\n", host_only_ms);
  std::printf("  loader alone, copy stream    %8.2f ms\n", loader_copy_stream_ms);
  std::printf("  loader alone, compute stream %8.2f ms\n", loader_compute_stream_ms);
  std::printf("  loader + work, serial        %8.2f ms  (copy + work = %.2f)\n", serial_ms,
              h2d_ms + compute_only_ms);
  std::printf("  loader + work, overlapped    %8.2f ms  (max(copy, work) = %.2f)\n", overlapped_ms,
              std::max(h2d_ms, compute_only_ms));
  std::printf("  speedup                      %8.2fx\n", serial_ms / overlapped_ms);
  return 0;
}
#else
int run(int, char**) {
  std::cerr << "loader_overlap_bench: frugal was built without CUDA\n";
  return 1;
}
#endif

}  // namespace
}  // namespace frugal::bench

int main(int argc, char** argv) {
  using namespace frugal::bench;
  return main_with_usage("loader_overlap_bench", kUsage, run, argc, argv);
}
