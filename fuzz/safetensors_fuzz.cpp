// libFuzzer target: the safetensors reader (train/safetensors.h), header and data section.
#include "fuzz_input.h"
#include "train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = frugal::fuzz::scratch_path("input.safetensors");
  frugal::fuzz::write_input(path, data, size);
  frugal::fuzz::loads_or_names(path, [&] { frugal::train::load_safetensors(path); });
  return 0;
}
