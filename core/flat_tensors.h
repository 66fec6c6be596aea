// Tensors that live for the whole run, made as one allocation.
//
// Note [Flat resident tensors]
// A model's parameters and buffers on a CUDA device, and an optimizer's state, live from the
// first step to the last. Allocated one by one, the caching allocator gives each tensor of 1-10
// MiB a block of a 20 MiB segment, and the unfilled tails of those segments stay reserved for
// the whole run: ResNet-18's parameters and momentum (82.7 MiB of such tensors) left 17.4 MiB of
// five segments empty, 1.9% of its checkpointed f16 step. Made together, they take one block:
//   - empty_flat carves each tensor from one allocation at a 512-byte boundary (the caching
//     allocator's rounding, so the allocation is as large as the blocks they took one by one),
//     made under a ResidentBlockScope: it gets a segment of its own size, 2 MiB-rounded, not a
//     20 MiB one or a larger cached block (memory/events.h);
//   - each keeps a storage and version counter of its own, so in-place updates and saved-tensor
//     checks see one tensor, as before;
//   - observers (Note [Allocation events]) see the one allocation; the tensors' releases are not
//     events, and the allocation goes back when the last of them is released.
// Module::to(cuda) makes the parameters and buffers it moves this way, and the optimizers their
// state on CUDA; elsewhere, where nothing caches segments, tensors stay allocated one by one.
//
//   std::vector<Tensor> m = zeros_flat({{{64, 3, 3, 3}, opts}, {{64}, opts}});
#pragma once

#include <utility>
#include <vector>

#include "core/tensor.h"

namespace frugal {

using FlatSpec = std::pair<Shape, TensorOptions>;  // one device for all

// Uninitialised tensors of these shapes and options, carved from one allocation.
std::vector<Tensor> empty_flat(const std::vector<FlatSpec>& specs);
// The same, filled with zeros.
std::vector<Tensor> zeros_flat(const std::vector<FlatSpec>& specs);

}  // namespace frugal
