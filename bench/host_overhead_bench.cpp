// frugal's own host time for one training step, without any kernel: the model, batch and
// optimizer live on the meta device, where tensors have shapes but no memory and ops launch
// nothing, so a step measures the framework alone (autograd records, allocator bookkeeping,
// autocast's casts and cache, the loss scaler, the optimizer). At 32x32 the GPU step is bound by
// host work; this separates frugal's share of it from the CUDA launches themselves.
//
//   host_overhead_bench --batch 256 --input 1x32x32 --classes 10 --steps 200
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/factory.h"
#include "models/registry.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/trainer.h"

namespace frugal::bench {
namespace {

constexpr const char* kUsage =
    "usage: host_overhead_bench [--model mobilenet_v2] [--batch N] [--input CxHxW]\n"
    "                           [--classes K] [--warmup N] [--steps N] [--precision P]\n"
    "  prints the median host time of a training step on the meta device for f32, f16 and\n"
    "  bf16, or for P alone (for a profiler)\n";

int run(int argc, char** argv) {
  Flags flags(argc, argv, {"model", "batch", "input", "classes", "warmup", "steps", "precision"},
              {"help"});
  if (flags.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  const std::string model_name = flags.str("model", "mobilenet_v2");
  const int64_t batch = flags.integer("batch", 256, 1);
  const std::vector<int64_t> chw = parse_chw(flags.str("input", "1x32x32"));
  const int64_t classes = flags.integer("classes", 10, 2);
  const int64_t warmup = flags.integer("warmup", 20, 1);
  const int64_t steps = flags.integer("steps", 200, 1);
  const Device meta = Device::meta();
  std::printf("%s, batch %lld, input %lldx%lldx%lld: host time per step on the meta device\n",
              model_name.c_str(), static_cast<long long>(batch), static_cast<long long>(chw[0]),
              static_cast<long long>(chw[1]), static_cast<long long>(chw[2]));
  std::vector<DType> precisions = {DType::f32, DType::f16, DType::bf16};
  if (const std::string p = flags.str("precision", ""); !p.empty()) {
    if (p != "f32" && p != "f16" && p != "bf16")
      throw std::invalid_argument("--precision expects f32, f16 or bf16, got '" + p + "'");
    precisions = {parse_dtype(p)};
  }
  for (DType precision : precisions) {
    auto model = models::create(model_name, {.num_classes = classes, .in_channels = chw[0]});
    model->to(meta);
    model->train();
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    Tensor images = Tensor::empty({batch, chw[1], chw[2], chw[0]}, {.device = meta});
    Tensor labels = Tensor::empty({batch}, {.dtype = DType::i64, .device = meta});
    std::unique_ptr<optim::GradScaler> scaler = optim::scaler_for(precision);
    auto step = [&] { train::train_step(*model, opt, images, labels, precision, scaler.get()); };
    for (int64_t i = 0; i < warmup; ++i) step();
    std::vector<double> us;
    for (int64_t i = 0; i < steps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      step();
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("  %-5s median %8.1f us  (min %.1f)\n", dtype_name(precision), median(us),
                *std::min_element(us.begin(), us.end()));
  }
  return 0;
}

}  // namespace
}  // namespace frugal::bench

int main(int argc, char** argv) {
  using namespace frugal::bench;
  return main_with_usage("host_overhead_bench", kUsage, run, argc, argv);
}
