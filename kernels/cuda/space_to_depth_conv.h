// The CUDA side of Note [Stride-2 stems as stride-1 convolutions] (kernels/space_to_depth.h):
// kernels/cuda/conv.cu rewrites the bf16 forward and weight gradient of the shapes that
// space_to_depth_handles() accepts with these, and runs the rewritten convolution on cuDNN.
#pragma once

#include "kernels/conv.h"
#include "kernels/space_to_depth.h"

namespace frugal::kernels::cuda {

// z (r.inner's input) from x, in dtype (bf16): copied bits, zero outside x and in the
// padding channels.
void space_to_depth_input(const Context& ctx, DType dtype, const Conv2dShape& s,
                          const SpaceToDepth& r, const void* x, void* z);

// w2 (r.inner's weights) from w, in dtype, zero where w has no tap.
void space_to_depth_weights(const Context& ctx, DType dtype, const Conv2dShape& s,
                            const SpaceToDepth& r, const void* w, void* w2);

// dw in dw_dtype (dtype or f32) from dw2, the rewritten convolution's weight gradient in dtype.
void space_to_depth_weight_grad(const Context& ctx, DType dtype, DType dw_dtype,
                                const Conv2dShape& s, const SpaceToDepth& r, const void* dw2,
                                void* dw);

}  // namespace frugal::kernels::cuda
