// The safetensors file format: named tensors behind a JSON header, readable by
// safetensors.torch.load_file and written so that its save_file output loads here.
// Tensors are stored exactly as given (no layout change: see Note [Checkpoint layout] in
// train/checkpoint.h for the conv-weight conversion that models and checkpoints apply).
//
//   train::save_safetensors("w.safetensors", {{"fc.weight", w}}, {{"format", "pt"}});
//   auto [tensors, metadata] = train::load_safetensors("w.safetensors");   // CPU tensors
//
// File = u64 little-endian header length N | N bytes of JSON, padded with spaces so that
// 8 + N is a multiple of 8 | the data section. The JSON maps each name to
// {"dtype": "F32"|"F16"|"BF16"|"F64"|"I64"|"U8", "shape": [...], "data_offsets": [begin, end]}
// (offsets relative to the data section) plus an optional "__metadata__": {string: string}.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace frugal::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// The reference implementation's limit: a larger header is treated as a corrupt file.
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsFile {
  NamedTensors tensors;  // on the CPU, in data-section order
  Metadata metadata;
};

// "F32" <-> DType::f32, ...; parse returns false on anything else.
const char* safetensors_dtype_name(DType t);
bool parse_safetensors_dtype(const std::string& s, DType* out);

// Writes every tensor (any device but meta; copied to the host) to a temporary file of its own,
// syncs it and renames it onto path, so a failure or a crash leaves either the old file or the
// new one; a symbolic link is written through, a directory or device node refused (Note [Save
// targets] in train/atomic_file.h). Names must be
// unique and must not be "__metadata__". Tensors go into the data section by decreasing element
// size (as the reference does) so every tensor starts aligned to its element size.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata = {});

// Reads and validates a whole file. Every defect (not a regular file, short file, header length,
// JSON nested over 32 levels or otherwise bad, a number out of range, dtype, shape/offset
// mismatch, gaps or overlaps between tensors, offsets past the data section, a data section of
// the wrong size) throws frugal::Error naming the file, the tensor and the byte offset. Values
// are kept as stored, NaN and infinity included (load_model and load_checkpoint refuse those).
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace frugal::train
