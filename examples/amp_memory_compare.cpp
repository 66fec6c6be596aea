// How much memory and time mixed precision saves: the same MobileNetV2, seed and batch trained a
// few steps in f32, f16 (autocast + GradScaler) and bf16 (autocast), through the C++ API.
//
//   amp_memory_compare             # CUDA: batch 128 at 3x224x224, 1000 classes; CPU: a small run
//   amp_memory_compare out.svg     # also writes the bar chart
#include <cstdio>
#include <fstream>

#include "base/error.h"
#include "kernels/context.h"
#include "train/precision_compare.h"

using namespace frugal;

int main(int argc, char** argv) {
  train::CompareOptions opt;
  opt.model = "mobilenet_v2";
  if (kernels::cuda_device_count() > 0) {
    // The configuration of the benchmark: ImageNet-sized inputs, a full-width model.
    opt.device = Device::cuda(0);
    opt.batch = 128;
    opt.channels = 3;
    opt.height = opt.width = 224;
    opt.classes = 1000;
    opt.steps = 20;
  } else {
    // A CPU-sized run: Fashion-MNIST-shaped inputs and a half-width model finish in seconds.
    opt.device = Device::cpu();
    opt.batch = 32;
    opt.channels = 1;
    opt.height = opt.width = 32;
    opt.classes = 10;
    opt.width_multiplier = 0.5;
    opt.warmup = 1;
    opt.steps = 3;
  }
  try {
    // f32, then f16 with loss scaling, then bf16; each from an emptied allocator cache.
    std::vector<train::CompareRow> rows = train::compare_precisions(opt);
    std::fputs(train::to_table(opt, rows).c_str(), stdout);

    const train::CompareRow& f16 = rows[1];
    std::printf("\nf16 needs %.0f%% of f32's peak memory and runs at %.2fx its speed.\n",
                100.0 * f16.peak_allocated_ratio, f16.images_per_second_ratio);
    if (argc > 1) {
      std::ofstream(argv[1]) << train::to_svg(opt, rows);
      std::printf("bar chart written to %s\n", argv[1]);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "amp_memory_compare: %s\n", e.what());
    return 1;
  }
  return 0;
}
