// Runs the f32 / f16 / bf16 comparison: one fresh model, optimizer and batch per precision, timed
// steps on the device's own clock (train/step_timer.h: CUDA events, the host never waiting
// between steps, so host work overlaps device work as in training).
#include "train/precision_compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "core/factory.h"
#include "kernels/context.h"
#include "memory/allocator.h"
#include "models/registry.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/captured_step.h"
#include "train/step_planner.h"
#include "train/step_timer.h"
#include "train/trainer.h"

#ifdef FRUGAL_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace frugal::train {
namespace {

void device_sync(Device device) {
#ifdef FRUGAL_WITH_CUDA
  if (device.is_cuda()) kernels::cuda::synchronize(device);
#else
  (void)device;
#endif
}

double ratio(double value, double f32_value) { return f32_value != 0 ? value / f32_value : 0.0; }

void check_options(const CompareOptions& o, DType precision) {
  FRUGAL_CHECK(precision == DType::f32 || is_low_precision(precision),
               "compare: precision must be f32, f16 or bf16, got ", precision);
  FRUGAL_CHECK(o.batch >= 1 && o.channels >= 1 && o.height >= 1 && o.width >= 1 && o.classes >= 2,
               "compare: needs batch >= 1, a positive input size and >= 2 classes, got batch ",
               o.batch, ", input ", o.channels, "x", o.height, "x", o.width, ", classes ",
               o.classes);
  FRUGAL_CHECK(o.warmup >= 0 && o.steps >= 1, "compare: needs warmup >= 0 and steps >= 1, got ",
               o.warmup, " and ", o.steps);
  FRUGAL_CHECK(!o.graph || o.warmup >= 2, "compare: a graph is captured in the last warm-up ",
               "step after at least one eager one: needs warmup >= 2, got ", o.warmup);
  FRUGAL_CHECK(o.device.is_cpu() || o.device.is_cuda(),
               "compare: needs a device with a clock (cpu or cuda), got ", o.device);
}

}  // namespace

CompareRow run_precision(const CompareOptions& o, DType precision) {
  check_options(o, precision);
  const Device device = o.device;
  memory::Allocator& alloc = memory::allocator_for(device);

  // The same weights for every precision: the default generator seeds the initialisers.
  manual_seed(o.seed);
  const models::ModelConfig config{.num_classes = o.classes,
                                   .in_channels = o.channels,
                                   .width = o.width_multiplier,
                                   .checkpoint = o.checkpoint,
                                   .recompute_depthwise = o.recompute_depthwise};
  auto model = models::create(o.model, config);
  model->to(device);
  model->train();
  device_sync(device);
  alloc.reset_peak_stats();  // Note [What the compare peak measures]

  // The same batch for every precision: images N(0, 1), labels uniform in [0, classes).
  Generator gen(o.seed);
  Tensor images = randn({o.batch, o.height, o.width, o.channels}, gen, {.device = device});
  std::vector<double> label_values = rand({o.batch}, gen).to_vector();  // [N] in [0, 1)
  for (double& v : label_values) {
    v = std::min(std::floor(v * static_cast<double>(o.classes)),
                 static_cast<double>(o.classes - 1));
  }
  Tensor labels = from_vector(label_values, {o.batch}, {.dtype = DType::i64, .device = device});

  optim::SGD opt(model->parameters(), {.lr = o.lr, .momentum = o.momentum});
  // f16's 5-bit exponent underflows small gradients: it needs loss scaling; bf16 does not.
  std::unique_ptr<optim::GradScaler> scaler = optim::scaler_for(precision);

  StepPlanner planner(o.planner ? device : Device::cpu());
  plan_before_first_step(planner, o.model, config, Shape{o.batch, o.height, o.width, o.channels},
                         precision);  // nothing when the planner is off
  auto train_once = [&] {
    return train::train_step(*model, opt, images, labels, precision, scaler.get());
  };
  auto eager_step = [&]() -> Tensor {
    Tensor out;
    planner.run([&] { out = train_once(); });
    return out;
  };
  // Planned, the capture goes into the planner's arena (Note [Captured training steps]), once the
  // planner has settled: a few more eager steps, which the median of the timed ones outvotes.
  CapturedStep captured(device, train_once,
                        {.warmup = std::max<int64_t>(1, o.warmup - 1), .planner = &planner});
  auto step = [&]() -> Tensor { return o.graph ? captured() : eager_step(); };

  CompareRow row;
  row.precision = precision;
  Tensor loss;
  for (int64_t i = 0; i < o.warmup; ++i) {
    loss = step();
    if (i == 0) row.first_loss = loss.item();
  }
  device_sync(device);
  StepTimer timer(device, o.steps);
  for (int64_t i = 0; i < o.steps; ++i) {
    timer.begin(i);
    loss = step();
    timer.end(i);
    if (o.warmup == 0 && i == 0) row.first_loss = loss.item();
  }
  const std::vector<double> ms = timer.milliseconds();
  row.loss = loss.item();
  row.loss_scale = scaler ? scaler->get_scale() : 1.0;
  row.median_step_ms = median(ms);
  row.images_per_second =
      row.median_step_ms > 0 ? 1000.0 * static_cast<double>(o.batch) / row.median_step_ms : 0;
  const memory::MemoryStats stats = alloc.stats();
  row.peak_allocated = stats.allocated_bytes.peak;
  row.peak_reserved = stats.reserved_bytes.peak;
  return row;  // model, optimizer, scaler and tensors are freed here
}

void fill_ratios(std::vector<CompareRow>& rows) {
  auto f32 = std::find_if(rows.begin(), rows.end(),
                          [](const CompareRow& r) { return r.precision == DType::f32; });
  FRUGAL_CHECK(f32 != rows.end(), "compare: the ratios need an f32 row");
  const CompareRow base = *f32;
  for (CompareRow& r : rows) {
    r.peak_allocated_ratio =
        ratio(static_cast<double>(r.peak_allocated), static_cast<double>(base.peak_allocated));
    r.peak_reserved_ratio =
        ratio(static_cast<double>(r.peak_reserved), static_cast<double>(base.peak_reserved));
    r.images_per_second_ratio = ratio(r.images_per_second, base.images_per_second);
    r.loss_ratio = ratio(r.loss, base.loss);
  }
}

std::vector<CompareRow> compare_precisions(const CompareOptions& o) {
  std::vector<CompareRow> rows;
  for (DType p : {DType::f32, DType::f16, DType::bf16}) {
    // No precision may reuse another's cached segments: each starts from the system.
    device_sync(o.device);
    memory::allocator_for(o.device).empty_cache();
    rows.push_back(run_precision(o, p));
  }
  device_sync(o.device);
  memory::allocator_for(o.device).empty_cache();
  fill_ratios(rows);
  return rows;
}

}  // namespace frugal::train
