// Model weights and training checkpoints as safetensors files, in PyTorch's names and layouts:
// a torchvision state_dict saved with safetensors.torch.save_file loads into the matching frugal
// model, and a frugal file loads into torch with model.load_state_dict(load_file(path)).
//
//   train::save_model("mnv2.safetensors", model);
//   train::load_model("mnv2.safetensors", model);     // all-or-nothing; in place, any device
//   train::save_checkpoint("ckpt.safetensors", model, &opt, {.epoch = 3, .step = 1200, .seed =
//   42}); train::TrainingState s = train::load_checkpoint("ckpt.safetensors", model, &opt);
//
// Note [Checkpoint layout]
// frugal keeps conv weights OHWI [K, kh, kw, C/groups] (DESIGN.md: NHWC everywhere); PyTorch and
// torchvision files hold OIHW [K, C/groups, kh, kw]. In our models every 4-D tensor is a conv
// weight (or an optimizer buffer shaped like one), so every 4-D tensor is permuted OHWI -> OIHW on
// save and OIHW -> OHWI on load, here and only here. Linear weights [out, in] and 1-D/scalar
// tensors are the same in both. train/safetensors.h itself stores tensors as given.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/safetensors.h"

namespace frugal::train {

// Permutes every 4-D tensor between frugal's OHWI and the file's OIHW (new CPU tensors; the
// others are passed through untouched). See Note [Checkpoint layout].
NamedTensors to_file_layout(const NamedTensors& tensors);
NamedTensors from_file_layout(const NamedTensors& tensors);

// Writes the module's parameters and buffers under their dotted names (num_batches_tracked is an
// i64 scalar, shape []).
void save_model(const std::string& path, const nn::Module& model, const Metadata& metadata = {});

// Loads a file written by save_model (or torch) into the module. A missing or extra tensor, a
// wrong shape or dtype, or a NaN or infinity in any tensor throws naming the tensor before
// anything is copied: on error the module is unchanged. A missing BatchNorm num_batches_tracked
// (torchvision's older weight files) starts at 0, as in PyTorch. The file's tensors move to the
// model's devices first, then are copied in place into the existing tensors: running out of device
// memory also leaves the module unchanged (an OutOfMemoryError). The price is one more copy of
// the model's tensors on its device while the load runs (load_checkpoint's too).
void load_model(const std::string& path, nn::Module& model);

// Where a training run stands, kept in the checkpoint's __metadata__ as "frugal.<field>".
struct TrainingState {
  int64_t epoch = 0;          // epochs completed
  int64_t step = 0;           // optimizer steps taken
  uint64_t seed = 0;          // the run's seed
  uint64_t rng_offset = 0;    // default_generator() offset, so dropout/shuffles continue the stream
  std::string optimizer{};    // opt.name() when saved with one; filled in by load_checkpoint
  bool scaler_saved = false;  // the file holds a loss scaler's state; filled in by load_checkpoint
  Metadata extra{};           // free-form user entries (keys must not start with "frugal.")
};

// One file: model tensors under their names, optimizer state under "optimizer.<name>", the loss
// scaler's under "scaler.<name>", the training state in __metadata__. `opt` and `scaler` may be
// null (then that part is not written).
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* opt,
                     const TrainingState& state, const optim::GradScaler* scaler = nullptr);

// Refuses a negative epoch or step and NaN or infinity in any tensor it would load. Validates
// the model part and the scaler part (loaded into a scratch scaler), then loads the optimizer
// (its load_state_dict is all-or-nothing), then the scaler, then copies the model: any error,
// running out of device memory included (load_model), leaves model, optimizer and scaler
// unchanged. With a null `opt` the optimizer part is
// ignored (e.g. to evaluate a checkpoint); with one, the file must hold state for an optimizer
// of the same name. A given `scaler` keeps its state when the file has no scaler part (a run
// saved in f32 or bf16 and resumed in f16 starts scaling afresh).
TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* opt,
                              optim::GradScaler* scaler = nullptr);

}  // namespace frugal::train
