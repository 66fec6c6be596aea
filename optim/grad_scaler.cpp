// GradScaler: a small state machine per optimizer (ready -> unscaled -> stepped -> update) over
// device scalars; every transition has a test in tests/optim/grad_scaler_test.cpp.
#include "optim/grad_scaler.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "kernels/amp.h"
#include "memory/events.h"
#include "optim/state_io.h"

namespace frugal::optim {

GradScaler::GradScaler(GradScalerOptions opt) : opt_(opt) {
  FRUGAL_CHECK(opt.init_scale > 0 && std::isfinite(opt.init_scale),
               "GradScaler: init_scale must be positive and finite, got ", opt.init_scale);
  FRUGAL_CHECK(opt.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ",
               opt.growth_factor);
  FRUGAL_CHECK(opt.backoff_factor > 0.0 && opt.backoff_factor < 1.0,
               "GradScaler: backoff_factor must be in (0, 1), got ", opt.backoff_factor);
  // The growth tracker counts clean steps in an f32 on the device: past 2^24, adding 1 no
  // longer changes it, and the scale would never grow.
  FRUGAL_CHECK(opt.growth_interval > 0 && opt.growth_interval <= kMaxGrowthInterval,
               "GradScaler: growth_interval must be in [1, 2^24], got ", opt.growth_interval);
}

void GradScaler::init_on(Device device) {
  if (scale_.defined()) {
    FRUGAL_CHECK(scale_.device() == device, "GradScaler: the scale lives on ", scale_.device(),
                 " but this call is on ", device, " (one scaler per device)");
    return;
  }
  // State for the whole run, whichever phase of the first step makes it (Note [Planned steps]).
  // All three are made before any is kept, so an allocation that fails leaves none.
  memory::CategoryScope tag(memory::Category::resident);
  Tensor scale = full({}, opt_.init_scale, {.device = device});
  Tensor tracker = full({}, pending_tracker_, {.device = device});
  Tensor found_inf = zeros({}, {.device = device});
  scale_ = std::move(scale), growth_tracker_ = std::move(tracker),
  found_inf_ = std::move(found_inf);
}

void GradScaler::abandon_step() { stage_.clear(); }

Tensor GradScaler::scale(const Tensor& loss) {
  if (!opt_.enabled) return loss;
  FRUGAL_CHECK(loss.defined() && is_floating(loss.dtype()),
               "GradScaler::scale: expected a floating loss tensor");
  init_on(loss.device());
  // In f32: the 0-d scale would take a 16-bit loss's dtype (PyTorch's result type), and 65536
  // is infinite in f16.
  return mul(is_low_precision(loss.dtype()) ? cast(loss, DType::f32) : loss, scale_);
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!opt_.enabled) return;
  auto it = stage_.find(&opt);
  if (it != stage_.end()) {
    FRUGAL_FAIL("GradScaler::unscale_: ",
                it->second == Stage::unscaled
                    ? "already called for this optimizer since the last update()"
                    : "called after step() for this optimizer; call update() first");
  }
  // Check every gradient before touching any, so a refusal leaves the gradients as they were.
  Device device = scale_.defined() ? scale_.device() : Device::cpu();
  bool have_device = scale_.defined();
  for (size_t i = 0; i < opt.params().size(); ++i) {
    Tensor g = opt.params()[i].grad();
    if (!g.defined()) continue;
    FRUGAL_CHECK(g.dtype() == DType::f32, "GradScaler::unscale_: gradient of parameter ", i, " is ",
                 describe(g), "; f16/bf16 gradients are refused (master gradients ",
                 "must be f32)");
    if (!have_device) device = g.device(), have_device = true;
    FRUGAL_CHECK(g.device() == device, "GradScaler::unscale_: gradient of parameter ", i, " is on ",
                 g.device(), " but the scale is on ", device);
  }
  init_on(device);
  if (stage_.empty()) fill_(found_inf_, 0.0);  // first unscale of this step: a kernel, no sync
  stage_[&opt] = Stage::unscaled;
  if (device.is_meta()) return;
  std::vector<Tensor> grads;
  std::vector<float*> pointers;
  std::vector<int64_t> sizes;
  for (const Tensor& p : opt.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    pointers.push_back(g.data<float>());
    sizes.push_back(g.numel());
    grads.push_back(std::move(g));
  }
  kernels::unscale_and_check_many(kernels::Context::of(device),
                                  static_cast<int64_t>(pointers.size()), pointers.data(),
                                  sizes.data(), scale_.data<float>(), found_inf_.data<float>());
  for (Tensor& g : grads) g.bump_version();
}

void GradScaler::step(Optimizer& opt) {
  if (!opt_.enabled) {
    opt.step();
    return;
  }
  auto it = stage_.find(&opt);
  FRUGAL_CHECK(it == stage_.end() || it->second != Stage::stepped,
               "GradScaler::step: already called for this optimizer since the last update()");
  // A throw from here to the end (the agreement's collective, the optimizer's first state
  // allocation) abandons the step: left "unscaled", the next step would skip unscaling its
  // gradients and step them still multiplied by the scale.
  try {
    if (it == stage_.end()) unscale_(opt);
    if (agree_) agree_(found_inf_);
    opt.set_found_inf(found_inf_);
    opt.step();
  } catch (...) {
    opt.set_found_inf(Tensor());
    abandon_step();
    throw;
  }
  // The flag is only for steps taken through the scaler; a later plain opt.step() must not see it.
  opt.set_found_inf(Tensor());
  stage_[&opt] = Stage::stepped;
}

void GradScaler::update() {
  if (!opt_.enabled) return;
  FRUGAL_CHECK(!stage_.empty(), "GradScaler::update: no unscale_() or step() since the last ",
               "update(), so no overflow check was recorded");
  stage_.clear();
  if (scale_.device().is_meta()) return;
  kernels::update_scale(kernels::Context::of(scale_.device()), scale_.data<float>(),
                        growth_tracker_.data<float>(), found_inf_.data<float>(), opt_.growth_factor,
                        opt_.backoff_factor, opt_.growth_interval);
  scale_.bump_version();
  growth_tracker_.bump_version();
}

double GradScaler::get_scale() const {
  if (!opt_.enabled) return 1.0;
  if (!scale_.defined() || scale_.device().is_meta()) return opt_.init_scale;
  return scale_.item();
}

int64_t GradScaler::growth_tracker() const {
  if (!growth_tracker_.defined() || growth_tracker_.device().is_meta()) {
    return static_cast<int64_t>(pending_tracker_);
  }
  return static_cast<int64_t>(growth_tracker_.item());
}

NamedTensors GradScaler::state_dict() const {
  if (!opt_.enabled) return {};  // as PyTorch's: a disabled scaler has no state to carry
  return {{"scale", scalar_tensor(get_scale())},
          {"growth_tracker", scalar_tensor(static_cast<double>(growth_tracker()))},
          {"growth_factor", scalar_tensor(opt_.growth_factor)},
          {"backoff_factor", scalar_tensor(opt_.backoff_factor)},
          {"growth_interval", scalar_tensor(static_cast<double>(opt_.growth_interval))}};
}

void GradScaler::load_state_dict(const NamedTensors& state) {
  // As PyTorch's: a disabled scaler ignores a saved state (an f16 run resumed in f32 or bf16).
  if (!opt_.enabled) return;
  FRUGAL_CHECK(!state.empty(), "GradScaler::load_state_dict: the state is empty, as a disabled ",
               "scaler saves it; an enabled scaler needs scale, growth_tracker and its factors");
  const std::vector<Tensor> no_params;
  StateReader r("grad_scaler", state, no_params);
  GradScalerOptions o = opt_;
  o.init_scale = r.scalar("scale");
  double tracker = r.scalar("growth_tracker");
  o.growth_factor = r.scalar("growth_factor");
  o.backoff_factor = r.scalar("backoff_factor");
  const double interval = r.scalar("growth_interval");
  r.check_all_used();
  // Checked before the cast: a NaN or a value past 2^63 has no int64_t (the cast would be UB).
  FRUGAL_CHECK(interval >= 1 && interval <= kMaxGrowthInterval && interval == std::floor(interval),
               "grad_scaler state: growth_interval must be a whole number in [1, 2^24], got ",
               interval);
  o.growth_interval = static_cast<int64_t>(interval);
  FRUGAL_CHECK(tracker >= 0 && tracker < interval && tracker == std::floor(tracker),
               "grad_scaler state: growth_tracker must be a whole number in [0, growth_interval ",
               interval, "), got ", tracker);
  GradScaler checked(o);  // validates the hyper-parameters before anything changes
  opt_ = o;
  pending_tracker_ = tracker;
  if (scale_.defined()) {
    fill_(scale_, o.init_scale);
    fill_(growth_tracker_, tracker);
  }
}

std::unique_ptr<GradScaler> scaler_for(DType precision) {
  return precision == DType::f16 ? std::make_unique<GradScaler>() : nullptr;
}

}  // namespace frugal::optim
