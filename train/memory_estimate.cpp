// The step's memory from a trace of its allocations (Note [What the estimate counts]).
#include "train/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "core/factory.h"
#include "core/ops.h"
#include "kernels/conv_workspace.h"
#include "kernels/matmul.h"
#include "memory/arena_plan.h"
#include "memory/step_trace.h"
#include "nn/construction_device.h"
#include "optim/grad_scaler.h"
#include "train/trainer.h"

namespace frugal::train {

namespace {

int64_t counted(size_t bytes, bool rounding) {
  return static_cast<int64_t>(rounding ? memory::round_request(bytes) : bytes);
}

// Where the trace's live bytes peak: the event index (-1: before any event) and the bytes.
struct Peak {
  int64_t event = -1;
  int64_t bytes = 0;
  int64_t released_before = 0;  // of the bytes live before the recording, released by then
};

Peak find_peak(const memory::StepTrace& t, bool rounding) {
  std::vector<int64_t> delta(static_cast<size_t>(t.events), 0);
  std::vector<int64_t> earlier(static_cast<size_t>(t.events), 0);
  for (const auto& a : t.allocations) {
    delta[static_cast<size_t>(a.begin)] += counted(a.bytes, rounding);
    if (a.end != memory::kStillLive)
      delta[static_cast<size_t>(a.end)] -= counted(a.bytes, rounding);
  }
  for (const auto& [at, bytes] : t.earlier_releases) {
    delta[static_cast<size_t>(at)] -= counted(bytes, rounding);
    earlier[static_cast<size_t>(at)] += counted(bytes, rounding);
  }
  Peak p{-1, t.live_before, 0};
  int64_t live = t.live_before, released = 0;
  for (size_t e = 0; e < delta.size(); ++e) {
    live += delta[e];
    released += earlier[e];
    if (live > p.bytes) p = {static_cast<int64_t>(e), live, released};
  }
  return p;
}

// The tensors a dry run's steps use, for the measured step to count what is live before it.
struct StepInputs {
  Tensor images, labels, loss;
};

// Runs `steps` training steps of `model` on a fixed batch (uninitialised on meta), handing each to
// `around(s, step, inputs)`, which runs it between whatever observation it sets up.
// On meta, `for_cuda` makes the convolutions ask for the workspace CUDA's would (Note [Bounded
// conv workspace]).
void run_steps(
    nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc, int64_t classes,
    DType precision, int steps, int64_t micro_batches, bool for_cuda,
    const std::function<void(int, const std::function<void()>&, const StepInputs&)>& around) {
  kernels::MetaPredictsCuda predicting(for_cuda);
  FRUGAL_CHECK(steps >= 1, "estimating a step: steps must be positive, got ", steps);
  FRUGAL_CHECK(!opt.params().empty(), "estimating a step: the optimizer has no parameters");
  const Device device = opt.params()[0].device();
  StepInputs in;
  in.images = Tensor::empty(input_nhwc, {DType::f32, device});
  in.labels = Tensor::empty(Shape{input_nhwc[0]}, {DType::i64, device});
  if (!device.is_meta()) {
    fill_(in.images, 0.5);
    fill_(in.labels, static_cast<double>(classes - 1));
  }
  std::unique_ptr<optim::GradScaler> scaler = optim::scaler_for(precision);
  model.train();
  // The loss outlives its step, as in a training loop that reads it later: a plan made from this
  // run must not give its bytes to the next step.
  auto step = [&] {
    in.loss =
        train_step(model, opt, in.images, in.labels, precision, scaler.get(), 0.0, micro_batches);
  };
  for (int s = 0; s < steps; ++s) around(s, step, in);
}

}  // namespace

std::vector<memory::StepTrace> trace_steps(nn::Module& model, optim::Optimizer& opt,
                                           const Shape& input_nhwc, int64_t classes,
                                           DType precision, int steps, int64_t micro_batches,
                                           bool for_cuda) {
  std::vector<memory::StepTrace> traces;
  run_steps(model, opt, input_nhwc, classes, precision, steps, micro_batches, for_cuda,
            [&](int, const std::function<void()>& step, const StepInputs&) {
              memory::StepRecorder recorder(opt.params()[0].device());
              step();
              traces.push_back(recorder.finish());
            });
  return traces;
}

memory::StepTrace trace_step(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc,
                             int64_t classes, DType precision, int steps, bool for_cuda) {
  return std::move(
      trace_steps(model, opt, input_nhwc, classes, precision, steps, 1, for_cuda).back());
}

MemoryEstimate estimate_memory(nn::Module& model, optim::Optimizer& opt, const Shape& input_nhwc,
                               int64_t classes, DType precision, bool for_cuda,
                               int64_t micro_batches, bool with_arena) {
  const Device device = opt.params().empty() ? Device::meta() : opt.params()[0].device();
  memory::StepTrace trace;
  MemoryEstimate e;
  MemoryBreakdown& b = e.at_peak;
  int64_t live_before = 0;
  run_steps(model, opt, input_nhwc, classes, precision, 2, micro_batches, for_cuda,
            [&](int s, const std::function<void()>& step, const StepInputs& in) {
              if (s == 0) return step();
              // What is live when the measured step starts, counted from the tensors themselves
              // rather than from the allocator (which may hold other tensors of the caller's):
              // parameters, their gradients, buffers, optimizer state, the batch, the last loss.
              for (const Tensor* t : {&in.images, &in.labels, &in.loss}) {
                live_before += counted(t->nbytes(), for_cuda);
              }
              for (const Tensor& p : opt.params()) {
                b.parameters += counted(p.nbytes(), for_cuda);
                if (p.grad().defined()) live_before += counted(p.grad().nbytes(), for_cuda);
              }
              for (const auto& [name, t] : model.named_buffers()) {
                if (t.device() == device) live_before += counted(t.nbytes(), for_cuda);
              }
              for (const Tensor& t : opt.state_tensors()) {
                if (t.device() == device) b.optimizer_state += counted(t.nbytes(), for_cuda);
              }
              live_before += b.parameters + b.optimizer_state;
              memory::StepRecorder recorder(device, live_before);
              step();
              trace = recorder.finish();
            });

  const Peak peak = find_peak(trace, for_cuda);
  // cuBLAS's workspace is live throughout on CUDA (made by the first product, kept).
  const int64_t cublas = for_cuda ? static_cast<int64_t>(kernels::kCublasWorkspaceBytes) : 0;
  e.peak_allocated_bytes = peak.bytes + cublas;
  e.before_bytes = live_before + cublas;
  b.workspace = cublas;
  // What was live before the step and still is: parameters, optimizer state, and the rest.
  b.other = std::max<int64_t>(
      0, trace.live_before - peak.released_before - b.parameters - b.optimizer_state);
  for (const auto& a : trace.allocations) {
    if (a.begin > peak.event || a.end <= peak.event) continue;
    const int64_t n = counted(a.bytes, for_cuda);
    const bool kept = a.end == memory::kStillLive;
    switch (a.category) {
      case memory::Category::workspace:
      case memory::Category::conv_workspace:
        b.workspace += n;
        break;
      case memory::Category::forward:
        (kept ? b.other : b.saved_activations) += n;
        break;
      case memory::Category::backward:
        (kept ? b.gradients : b.transients) += n;
        break;
      case memory::Category::optimizer:
        (kept ? b.optimizer_state : b.transients) += n;
        break;
      case memory::Category::resident:
        b.other += n;
        break;
    }
    if (a.begin == peak.event) {
      e.phase = a.phase;
      e.module = a.module ? *a.module : "";
    }
  }
  if (with_arena) {
    const memory::StepPlan plan = memory::plan_step(trace);
    e.arena_bytes = plan.arena_bytes;
    e.arena_lower_bound = plan.lower_bound;
  }
  return e;
}

MemoryEstimate estimate_memory(const std::string& name, const models::ModelConfig& config,
                               const Shape& input_nhwc, DType precision,
                               const std::string& optimizer, int64_t micro_batches, bool for_cuda,
                               bool with_arena, const ModelWrapper& wrap) {
  FRUGAL_CHECK(optimizer == "sgd" || optimizer == "adamw",
               "estimate_memory: optimizer must be sgd or adamw, got '", optimizer, "'");
  // Building a model takes its initial weights' share of the random stream, the steps dropout
  // masks: the caller's random stream must not notice.
  GeneratorStateGuard keep_random_stream;
  std::shared_ptr<nn::Module> model;
  {
    // Shapes only (Note [Building modules on the meta device]).
    nn::ConstructionDeviceGuard on_meta(Device::meta());
    model = models::create(name, config);
  }
  if (wrap) model = wrap(model);
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer == "sgd") {
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SgdOptions{.momentum = 0.9});
  } else {
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{});
  }
  return estimate_memory(*model, *opt, input_nhwc, config.num_classes, precision, for_cuda,
                         micro_batches, with_arena);
}

int64_t largest_batch(const std::function<int64_t(int64_t batch)>& peak, int64_t budget,
                      int64_t granularity, int64_t limit) {
  FRUGAL_CHECK(granularity >= 1 && limit >= granularity,
               "largest_batch: needs 1 <= granularity <= limit, got ", granularity, " and ", limit);
  if (peak(granularity) > budget) return 0;
  int64_t fits = granularity, fails = 0;  // multiples of granularity; 0: none failed yet
  while (fails == 0) {
    const int64_t next = std::min(fits * 2, limit / granularity * granularity);
    if (next == fits) return fits;
    if (peak(next) <= budget) {
      fits = next;
    } else {
      fails = next;
    }
  }
  while (fails - fits > granularity) {
    const int64_t mid = (fits + fails) / 2 / granularity * granularity;
    (peak(mid) <= budget ? fits : fails) = mid;
  }
  return fits;
}

std::string breakdown_table(const MemoryEstimate& e) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const MemoryBreakdown& b = e.at_peak;
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "peak allocated %.2f MiB, in the %s%s%s\n",
                e.peak_allocated_bytes / kMiB, memory::phase_name(e.phase),
                e.module.empty() ? "" : " of ", e.module.c_str());
  s += line;
  const std::pair<const char*, int64_t> rows[] = {
      {"parameters", b.parameters},
      {"gradients", b.gradients},
      {"optimizer state", b.optimizer_state},
      {"saved activations", b.saved_activations},
      {"transient buffers", b.transients},
      {"library workspace (cuBLAS, cuDNN bounded)", b.workspace},
      {"batch, buffers, loss", b.other}};
  for (const auto& [name, bytes] : rows) {
    std::snprintf(line, sizeof line, "  %-40s %10.2f MiB\n", name, bytes / kMiB);
    s += line;
  }
  std::snprintf(line, sizeof line,
                "step planner arena %.2f MiB (its bound %.2f MiB) for the forward and backward\n",
                e.arena_bytes / kMiB, e.arena_lower_bound / kMiB);
  s += line;
  return s;
}

}  // namespace frugal::train
