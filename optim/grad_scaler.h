// Dynamic loss scaling for f16 training (PyTorch's GradScaler semantics, no host sync in a step).
// The scale, the growth tracker and the found-inf flag are f32 scalars on the loss's device;
// unscale is fused with the non-finite check, the optimizer kernels skip on the flag, and the
// scale update is one tiny kernel. bf16 has f32's exponent range and needs no scaling: leave
// the scaler out, or construct it with enabled = false (then scale/unscale_/update do nothing
// and step just steps).
//
//   optim::GradScaler scaler;                       // 65536, x2 every 2000 clean steps, x0.5
//   { AutocastGuard amp(Device::cuda(), DType::f16); loss = cross_entropy(model(x), y); }
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                           // optional: before gradient clipping
//   scaler.step(opt);                               // skipped on the device if grads overflowed
//   scaler.update();
//
// One found-inf flag serves every optimizer stepped between two update() calls (PyTorch keeps
// one per optimizer and skips each only on its own overflow; here an overflow in any gradient
// unscaled so far in the step also skips the optimizers stepped after it). A skipped step
// leaves parameters and state untouched and does not advance AdamW's step count (kept on the
// device); SGD's "first step" (momentum buffer = gradient) is host state, so when the very first
// step is skipped the next one uses buf = (1 - dampening) * g, which differs from PyTorch only
// when dampening != 0.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace frugal::optim {

// The longest growth_interval: the clean-step count is an f32 on the device, exact to 2^24.
constexpr int64_t kMaxGrowthInterval = int64_t{1} << 24;

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions opt = {});

  // loss * scale (multiplied by the device scale tensor; no host read). The scale is created on
  // the loss's device on first use.
  Tensor scale(const Tensor& loss);
  // Multiplies every parameter gradient of `opt` by 1/scale in place and records non-finite
  // values in the device flag. Throws if called twice for `opt` before update(), after step(),
  // or on a gradient that is not f32 (master gradients must be f32).
  void unscale_(Optimizer& opt);
  // Unscales if unscale_ was not called, then runs opt.step() with the flag set: the optimizer
  // kernels skip the update on the device when any gradient overflowed.
  void step(Optimizer& opt);
  // Backs the scale off after an overflow, grows it after growth_interval clean steps. Throws if
  // no optimizer was unscaled since the last update.
  void update();
  // Forgets the unscale_/step calls since the last update() without changing the scale: for a
  // step that failed part-way (train/oom_recovery.h) and is tried again. The gradients it
  // unscaled are the failed step's, which the retry drops.
  void abandon_step();

  // The current scale, read back from the device: a synchronisation, for logging and tests.
  // 1.0 when disabled.
  double get_scale() const;
  // The growth tracker (clean steps since the last change of scale), read back likewise.
  int64_t growth_tracker() const;
  bool is_enabled() const { return opt_.enabled; }
  const GradScalerOptions& options() const { return opt_; }
  // The device flag of the current step (f32 scalar; undefined before the first unscale).
  const Tensor& found_inf() const { return found_inf_; }
  // Runs on the flag in step(), after unscaling and before the optimizer reads it: data
  // parallelism makes every rank's flag the ranks' maximum there, so all skip the same steps
  // (dist::agree_on_overflow). Null (the default) leaves the flag local.
  using FoundInfAgreement = std::function<void(Tensor& found_inf)>;
  void set_found_inf_agreement(FoundInfAgreement agree) { agree_ = std::move(agree); }

  // "scale", "growth_tracker" (read back: a synchronisation), "growth_factor",
  // "backoff_factor", "growth_interval" as f64 CPU scalars. Loading checks all entries first.
  // As PyTorch's: a disabled scaler's state is empty, and loading into one does nothing.
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);

 private:
  enum class Stage { unscaled, stepped };
  void init_on(Device device);

  GradScalerOptions opt_;
  Tensor scale_;                // [] f32, device
  Tensor growth_tracker_;       // [] f32, device (a whole number)
  Tensor found_inf_;            // [] f32, device; zeroed by the first unscale_ of a step
  double pending_tracker_ = 0;  // a loaded tracker, until the device tensors exist
  std::map<const Optimizer*, Stage> stage_;  // optimizers touched since the last update()
  FoundInfAgreement agree_;
};

// The scaler PyTorch's recipe gives a training precision: one with the defaults for f16 (its
// 5-bit exponent underflows small gradients), none (null) for f32 and bf16.
std::unique_ptr<GradScaler> scaler_for(DType precision);

}  // namespace frugal::optim
