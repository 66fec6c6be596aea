// Saved-activation estimate of a forward (train/saved_estimate.h).
#include "train/saved_estimate.h"

#include <cstdio>
#include <functional>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/ops.h"
#include "memory/allocator.h"
#include "optim/grad_scaler.h"
#include "train/trainer.h"

namespace frugal::train {

SavedEstimate estimate_saved(nn::Module& model, const Shape& input_nhwc, DType precision,
                             int depth) {
  std::vector<Tensor> params = model.parameters();
  FRUGAL_CHECK(!params.empty(), "estimate_saved: the model has no parameters to place it");
  FRUGAL_CHECK(precision == DType::f32 || is_low_precision(precision),
               "estimate_saved: precision must be f32, f16 or bf16, got ", precision);
  const Device device = params[0].device();
  model.train();
  Tensor x = Tensor::empty(input_nhwc, {DType::f32, device});
  if (!device.is_meta()) fill_(x, 0.5);
  autograd::GradModeGuard grad(true);
  Tensor out;
  {
    AutocastGuard amp(device, is_low_precision(precision) ? precision : DType::f16,
                      precision != DType::f32);
    out = model(x);
  }
  SavedEstimate e;
  e.modules = autograd::saved_bytes_by_module({out}, depth);
  for (const auto& m : e.modules) {
    e.saved_bytes += m.saved_bytes;
    e.conv_output_bytes += m.conv_output_bytes;
  }
  return e;
}

std::string saved_table(const SavedEstimate& e) {
  constexpr double kMiB = 1024.0 * 1024.0;
  auto ratio = [](size_t a, size_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / b; };
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %14s %22s %8s\n", "module", "saved MiB",
                "one per conv layer MiB", "ratio");
  s += line;
  for (const auto& m : e.modules) {
    if (m.saved_bytes == 0 && m.conv_output_bytes == 0) continue;
    std::snprintf(line, sizeof line, "%-28s %14.2f %22.2f %8.2f\n",
                  m.module.empty() ? "(top level)" : m.module.c_str(), m.saved_bytes / kMiB,
                  m.conv_output_bytes / kMiB, ratio(m.saved_bytes, m.conv_output_bytes));
    s += line;
  }
  std::snprintf(line, sizeof line, "%-28s %14.2f %22.2f %8.2f\n", "total", e.saved_bytes / kMiB,
                e.conv_output_bytes / kMiB, ratio(e.saved_bytes, e.conv_output_bytes));
  s += line;
  return s;
}

namespace {

// Runs `steps` training steps of `model` on a fixed batch (uninitialised on meta), handing each to
// `around(s, step)`, which runs it between whatever observation it sets up.
void run_steps(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc, int64_t classes,
               DType precision, int steps,
               const std::function<void(int, const std::function<void()>&)>& around) {
  FRUGAL_CHECK(steps >= 1, "estimating a step: steps must be positive, got ", steps);
  FRUGAL_CHECK(!opt.params().empty(), "estimating a step: the optimizer has no parameters");
  const Device device = opt.params()[0].device();
  Tensor images = Tensor::empty(input_nhwc, {DType::f32, device});
  Tensor labels = Tensor::empty(Shape{input_nhwc[0]}, {DType::i64, device});
  if (!device.is_meta()) {
    fill_(images, 0.5);
    fill_(labels, static_cast<double>(classes - 1));
  }
  std::unique_ptr<optim::GradScaler> scaler = optim::scaler_for(precision);
  model.train();
  // The loss outlives its step, as in a training loop that reads it later: a plan made from this
  // run must not give its bytes to the next step.
  Tensor loss;
  auto step = [&] { loss = train_step(model, opt, images, labels, precision, scaler.get()); };
  for (int s = 0; s < steps; ++s) around(s, step);
}

}  // namespace

StepMemory estimate_step_memory(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc,
                                int64_t classes, DType precision, int steps) {
  StepMemory m;
  run_steps(model, opt, input_nhwc, classes, precision, steps, [&](int s, const auto& step) {
    if (s + 1 < steps) return step();
    const Device device = opt.params()[0].device();
    m.before_bytes = memory::allocator_for(device).stats().allocated_bytes.current;
    memory::PeakTracker tracker(device, m.before_bytes);
    step();
    m.peak = tracker.at_peak();
  });
  return m;
}

std::vector<memory::StepTrace> trace_steps(nn::Module& model, optim::Optimizer& opt,
                                           const Shape& input_nhwc, int64_t classes,
                                           DType precision, int steps) {
  std::vector<memory::StepTrace> traces;
  run_steps(model, opt, input_nhwc, classes, precision, steps, [&](int, const auto& step) {
    memory::StepRecorder recorder(opt.params()[0].device());
    step();
    traces.push_back(recorder.finish());
  });
  return traces;
}

memory::StepTrace trace_step(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc,
                             int64_t classes, DType precision, int steps) {
  return std::move(trace_steps(model, opt, input_nhwc, classes, precision, steps).back());
}

std::string step_table(const StepMemory& m) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "peak allocated %.2f MiB, in the %s%s%s\n", m.peak.bytes / kMiB,
                memory::phase_name(m.peak.phase), m.peak.module.empty() ? "" : " of ",
                m.peak.module.c_str());
  s += line;
  for (int c = 0; c < memory::kNumCategories; ++c) {
    std::snprintf(line, sizeof line, "  %-58s %10.2f MiB\n",
                  memory::category_name(static_cast<memory::Category>(c)),
                  m.peak.by_category[static_cast<size_t>(c)] / kMiB);
    s += line;
  }
  return s;
}

}  // namespace frugal::train
