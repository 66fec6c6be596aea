// f32 weight gradients of few-channel convolutions larger than 3x3 as im2col chunks and cuBLAS
// GEMMs (Note [Stem weight gradients as GEMMs] in stem_gemm.h).
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/direct_conv_common.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/stem_gemm.h"

namespace frugal::kernels::cuda {
namespace {

// patch[q, (i * kw + j) * C + c] = x[n, oy * sh - ph + i * dh, ox * sw - pw + j * dw, c] for the
// positions p = p0 + q (p = (n * OH + oy) * OW + ox) of the chunk, zero in the padding. One
// thread a (position, tap) and its C channels: consecutive threads take consecutive taps of a
// position, so the stores are coalesced and a row's loads fall on few lines of x. 32-bit
// indices (stem_gemm_handles: the positions fit, and a chunk's patch is under
// kConvWorkspaceCap): the first version, a thread per patch element with 64-bit divisions,
// made ResNet-18's f32 step 0.46 ms slower than cuDNN's algorithm 0 (H200).
__global__ void im2col_kernel(Geom g, int kh, int kw, int p0, int count,
                              const float* __restrict__ x, float* __restrict__ patch) {
  const int taps = kh * kw;
  const int total = count * taps;
  for (int e = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); e < total;
       e += static_cast<int>(gridDim.x * blockDim.x)) {
    const int q = e / taps, tap = e - q * taps;
    const int p = p0 + q;
    const int r = p / g.ow, ox = p - r * g.ow;
    const int n = r / g.oh, oy = r - n * g.oh;
    const int i = tap / kw, j = tap - i * kw;
    const int iy = oy * g.sh - g.ph + i * g.dh, ix = ox * g.sw - g.pw + j * g.dw;
    float* out = patch + static_cast<int64_t>(e) * g.c;
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
      const float* in = x + ((static_cast<int64_t>(n) * g.h + iy) * g.w + ix) * g.c;
      for (int c = 0; c < g.c; ++c) out[c] = in[c];
    } else {
      for (int c = 0; c < g.c; ++c) out[c] = 0.0f;
    }
  }
}

}  // namespace

void stem_gemm_backward_weight(const Context& ctx, const Conv2dShape& s, const float* x,
                               const float* dy, float* dw) {
  const char* op = "conv2d_backward_weight";
  cudaStream_t stream = stream_of(ctx, op);
  const int64_t positions = s.n * s.oh() * s.ow();
  const int64_t m = s.kh * s.kw * s.c;
  const size_t bound = cuda_conv_workspace_bytes(ConvPass::backward_weight, DType::f32, s);
  const int64_t chunk =
      std::min<int64_t>(positions, static_cast<int64_t>(bound / sizeof(float)) / m);
  FRUGAL_CHECK(chunk >= 1, op, ": the workspace bound of ", bound, " bytes holds no patch row of ",
               m, " floats for ", s.str());
  // the bytes every call of this shape asks for, as the planner and the meta device expect
  memory::DataPtr ws = ctx.workspace(bound, memory::Category::conv_workspace);
  auto patch = static_cast<float*>(ws.get());
  const Geom g = geom_of(s);
  for (int64_t p0 = 0; p0 < positions; p0 += chunk) {
    const int64_t count = std::min(chunk, positions - p0);
    im2col_kernel<<<grid_for(ctx, count * s.kh * s.kw), kThreads, 0, stream>>>(
        g, static_cast<int>(s.kh), static_cast<int>(s.kw), static_cast<int>(p0),
        static_cast<int>(count), x, patch);
    FRUGAL_LAUNCH_CHECK();
    // dw[K, M] (+)= dy[p0 : p0 + count, K]^T patch[count, M]
    gemm_tf32(ctx, DType::f32, true, false, s.k, m, count, dy + p0 * s.k, patch,
              p0 == 0 ? 0.0 : 1.0, dw, conv_allow_tf32());
  }
}

}  // namespace frugal::kernels::cuda
