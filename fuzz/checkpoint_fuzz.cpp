// libFuzzer target: the checkpoint and model loaders (train/checkpoint.h) on one file, each into
// the fuzz model (fuzz_model.h). Besides naming the file, a rejected file must leave model,
// optimizer and scaler bit-identical (the loaders' all-or-nothing promise); a change aborts as a
// crash.
//
// Note [Reused load targets]
// Building the model, optimizer and scaler and snapshotting them for every input took about half
// of the target's time, so they are built once and kept while loads are rejected. That is sound
// because a rejected load must leave every tensor they hold (names, shapes, dtypes, bytes: all
// that the loaders read or write, the scaler's options included) as it was built, and that is
// checked after every rejection: an input either aborts here or leaves them indistinguishable
// from fresh ones for the next input, so an input behaves the same mid-run as when its crash file
// is replayed alone. A load that succeeded changed them on purpose; they are rebuilt (and
// snapshotted again) at once, in the same input, so that the next one starts from fresh objects
// and libFuzzer's leak check sees as many frees as allocations.
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "fuzz_input.h"
#include "fuzz_model.h"
#include "tensor_snapshot.h"
#include "train/checkpoint.h"

namespace {

using namespace frugal;

// What load_checkpoint loads into, and their state as built.
struct CheckpointInto {
  std::shared_ptr<nn::Sequential> model = fuzz::tiny_model();
  optim::SGD opt{model->parameters(), fuzz::kSgd};
  optim::GradScaler scaler;
  const fuzz::TensorSnapshot model_built{fuzz::model_tensors(*model)};
  const fuzz::TensorSnapshot opt_built{opt.state_dict()};
  const fuzz::TensorSnapshot scaler_built{scaler.state_dict()};
};

// What load_model loads into (a model of its own, so neither load sees the other's), as built.
struct ModelInto {
  std::shared_ptr<nn::Sequential> model = fuzz::tiny_model();
  const fuzz::TensorSnapshot built{fuzz::model_tensors(*model)};
};

void require_unchanged(const fuzz::TensorSnapshot& built, const nn::NamedTensors& now,
                       const char* what) {
  if (!built.matches(now)) {
    std::fprintf(stderr, "a rejected file changed the %s\n", what);
    std::abort();
  }
}

// Built on the first input and after every successful load (Note [Reused load targets]). Never
// destroyed: the CPU allocator the tensors return to is a static that may go first at exit.
template <typename T>
std::optional<T>& reused() {
  static auto* slot = new std::optional<T>(std::in_place);
  return *slot;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchFile input("input.safetensors");
  input.write(data, size);
  const std::string& path = input.path();

  std::optional<CheckpointInto>& checkpoint_into = reused<CheckpointInto>();
  CheckpointInto& c = *checkpoint_into;
  if (fuzz::loads_or_names(path,
                           [&] { train::load_checkpoint(path, *c.model, &c.opt, &c.scaler); })) {
    checkpoint_into.reset();  // the old objects first: the new ones reuse their memory
    checkpoint_into.emplace();
  } else {
    require_unchanged(c.model_built, fuzz::model_tensors(*c.model), "model");
    require_unchanged(c.opt_built, c.opt.state_dict(), "optimizer");
    require_unchanged(c.scaler_built, c.scaler.state_dict(), "scaler");
  }

  std::optional<ModelInto>& model_into = reused<ModelInto>();
  ModelInto& m = *model_into;
  if (fuzz::loads_or_names(path, [&] { train::load_model(path, *m.model); })) {
    model_into.reset();
    model_into.emplace();
  } else {
    require_unchanged(m.built, fuzz::model_tensors(*m.model), "model (load_model)");
  }
  return 0;
}
