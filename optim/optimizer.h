// Optimizers over f32 master parameters: SGD (momentum, dampening, nesterov, weight decay; one
// fused kernel per 32 parameters) and AdamW (one fused kernel per parameter). A step first
// checks every gradient and only then updates, so a bad gradient throws and leaves weights and
// state as they were.
//
//   optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 4e-5});
//   opt.zero_grad(); loss.backward(); opt.step();
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace frugal::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
class StateReader;  // optim/state_io.h

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient.
  void step();
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr);
  // The rate a learning-rate schedule starts from (PyTorch's param_group['initial_lr']): the first
  // schedule made on this optimizer records lr() then, and every later one starts from the same
  // value. state_dict saves it, so a schedule made after load_state_dict starts from the run's
  // first rate, not from the decayed one the state was saved at.
  double schedule_base_lr();
  std::optional<double> initial_lr() const { return initial_lr_; }

  // Note [Learning rate on the device]
  // A captured CUDA graph replays its kernels with the arguments of the capture, so a learning
  // rate passed by value would stay at its capture-time value under a schedule. After
  // keep_lr_on_device(device) the update kernels of parameters on `device` read it from an f32
  // scalar there instead, which set_lr keeps current with an asynchronous fill (stream-ordered
  // before the next step, replayed or not). The kernels then use f32(lr): SGD does anyway;
  // AdamW's decay and step size follow it. train_epoch does this for EpochOptions::graph.
  void keep_lr_on_device(Device device);
  const Tensor& lr_on_device() const { return lr_device_; }  // undefined unless kept
  const std::vector<Tensor>& params() const { return params_; }
  // The loss scaler's device flag (f32 scalar): when non-zero, kernels skip the update.
  void set_found_inf(const Tensor& flag) { found_inf_ = flag; }
  const Tensor& found_inf() const { return found_inf_; }

  // State as named tensors ("state.<i>.<name>", hyper-parameters as f64 scalars "lr", ...),
  // and back. Loading checks every name, shape and dtype before changing anything, refuses state
  // saved for another number of parameters, and takes the saved hyper-parameters (momentum,
  // betas, ...) as PyTorch's load_state_dict does. State saved before these entries existed
  // (no "param_count") keeps the optimizer's own hyper-parameters.
  virtual NamedTensors state_dict() const = 0;
  virtual void load_state_dict(const NamedTensors& state) = 0;
  virtual std::string name() const = 0;
  // The state tensors themselves as they live on the parameters' devices (state_dict() makes
  // host copies of some), for counting memory. Undefined ones (not made yet) are left out.
  virtual std::vector<Tensor> state_tensors() const = 0;

 protected:
  // Updates the parameters at `indices`, whose gradients step() has checked. The default calls
  // update() for each; SGD batches them into multi-tensor launches.
  virtual void update_all(const std::vector<size_t>& indices);
  virtual void update(size_t index, const Tensor& param, const Tensor& grad) = 0;
  // Zeroed state for the parameters at `indices`, each shaped like its parameter ([] with
  // `scalars`), in order; those on a CUDA device take one allocation per device (Note [Flat
  // resident tensors] in core/flat_tensors.h). Throws before anything is made when one fails.
  std::vector<Tensor> make_state(const std::vector<size_t>& indices, bool scalars = false) const;
  // Loaded state (one per parameter, undefined where a parameter has none) copied to the
  // parameters' devices into state made as make_state makes it.
  std::vector<Tensor> state_from(const std::vector<Tensor>& loaded) const;
  const float* found_inf_ptr(const Tensor& param) const;
  // The device learning rate for `param`'s device, or null (Note [Learning rate on the device]).
  const float* lr_device_ptr(const Tensor& param) const;
  // The entries every optimizer saves ("lr", "param_count", "initial_lr" once a schedule set
  // it), and their reading: checked by load_common, assigned by apply_common after the
  // optimizer's own checks passed.
  struct CommonState {
    double lr;
    std::optional<double> initial_lr;
    bool has_hyper_parameters;  // saved with "param_count" and the optimizer's hyper-parameters
  };
  NamedTensors common_state() const;
  CommonState load_common(StateReader& r) const;
  void apply_common(const CommonState& c);

  std::vector<Tensor> params_;
  double lr_;
  std::optional<double> initial_lr_;
  Tensor lr_device_;  // f32 [] or undefined
  Tensor found_inf_;
};

struct SgdOptions {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
// Throws naming what is out of range; `where` names the caller (the constructor, a load).
void check_options(const SgdOptions& o, const char* where);

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SgdOptions opt);
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  std::string name() const override { return "sgd"; }
  std::vector<Tensor> state_tensors() const override;
  const SgdOptions& options() const { return opt_; }

 protected:
  void update_all(const std::vector<size_t>& indices) override;
  void update(size_t index, const Tensor& param, const Tensor& grad) override;

 private:
  SgdOptions opt_;
  std::vector<Tensor> momentum_;  // per parameter, undefined until its first step
};

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};
void check_options(const AdamWOptions& o, const char* where);

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions opt);
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  std::string name() const override { return "adamw"; }
  std::vector<Tensor> state_tensors() const override;
  const AdamWOptions& options() const { return opt_; }

 protected:
  void update_all(const std::vector<size_t>& indices) override;
  void update(size_t index, const Tensor& param, const Tensor& grad) override;

 private:
  AdamWOptions opt_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  // Per-parameter step counts as f32 scalars on the parameter's device: a step skipped on the
  // scaler's found_inf does not advance them, with no host read (PyTorch's capturable AdamW).
  std::vector<Tensor> steps_;
};

}  // namespace frugal::optim
