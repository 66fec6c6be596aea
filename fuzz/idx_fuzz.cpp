// libFuzzer target: the IDX reader (data/idx.h) on one file, gzip'd or raw (it decides by the
// first two bytes), read as images and as labels.
#include "data/idx.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static frugal::fuzz::ScratchFile input("input.idx");
  input.write(data, size);
  const std::string& path = input.path();
  frugal::fuzz::loads_or_names(path, [&] { frugal::data::read_idx_images(path); });
  frugal::fuzz::loads_or_names(path, [&] { frugal::data::read_idx_labels(path); });
  return 0;
}
