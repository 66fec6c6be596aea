// libFuzzer target: the checkpoint and model loaders (train/checkpoint.h) on one file, each into
// a fresh model. Besides naming the file, a rejected file must leave model, optimizer and scaler
// bit-identical (the loaders' all-or-nothing promise); a change aborts as a crash.
#include <cstdio>

#include "fuzz_input.h"
#include "fuzz_model.h"
#include "train/checkpoint.h"

namespace {

void require_unchanged(bool loaded, bool unchanged, const char* what) {
  if (!loaded && !unchanged) {
    std::fprintf(stderr, "a rejected file changed the %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frugal;
  static const std::string path = fuzz::scratch_path("input.safetensors");
  fuzz::write_input(path, data, size);

  auto model = fuzz::tiny_model();
  optim::SGD opt(model->parameters(), fuzz::kSgd);
  optim::GradScaler scaler;
  auto model_before = fuzz::snapshot(*model);
  auto opt_before = fuzz::snapshot(opt.state_dict());
  auto scaler_before = fuzz::snapshot(scaler.state_dict());
  bool loaded =
      fuzz::loads_or_names(path, [&] { train::load_checkpoint(path, *model, &opt, &scaler); });
  require_unchanged(loaded, fuzz::snapshot(*model) == model_before, "model");
  require_unchanged(loaded, fuzz::snapshot(opt.state_dict()) == opt_before, "optimizer");
  require_unchanged(loaded, fuzz::snapshot(scaler.state_dict()) == scaler_before, "scaler");

  auto weights_only = fuzz::tiny_model();
  auto weights_before = fuzz::snapshot(*weights_only);
  loaded = fuzz::loads_or_names(path, [&] { train::load_model(path, *weights_only); });
  require_unchanged(loaded, fuzz::snapshot(*weights_only) == weights_before, "model (load_model)");
  return 0;
}
