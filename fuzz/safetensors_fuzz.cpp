// libFuzzer target: the safetensors reader (train/safetensors.h), header and data section.
#include "fuzz_input.h"
#include "train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static frugal::fuzz::ScratchFile input("input.safetensors");
  input.write(data, size);
  const std::string& path = input.path();
  frugal::fuzz::loads_or_names(path, [&] { frugal::train::load_safetensors(path); });
  return 0;
}
