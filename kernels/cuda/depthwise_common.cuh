// What the depthwise kernels share (depthwise_conv.cu: strips a thread; depthwise_tiles.cu: tiles
// a block): the pack and strip sizes, the strips' column maps, and what a kernel makes of a loaded
// pack of x (as it is, or normalized through batch norm and an activation).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/conv.h"

namespace frugal::kernels::cuda::depthwise {

// Pixels a strip: 8 divides the 112- and 56-wide maps of 224x224 models, and the strided input
// gradient needs an even count (GatherCols); 28, 14 and 7 leave one partial strip a row.
constexpr int kStrip = 8;
// Channels a thread: 4 for every dtype and both kernel sizes. The gathers hold 8 x 4 f32
// accumulators and one kernel row of weights (<= 20); with 8 channels the f16 3x3 forward took
// 128 registers, 16 warps a multiprocessor, and ran at 1.3 TB/s against 2.6 for f32's packs of 4
// (one pixel row of 112x112x32, batch 128, H200).
constexpr int kPack = 4;

// Whether packs of V channels fit: C divides into them and every non-null pointer is aligned to
// one pack.
template <typename T, int V>
bool packs_fit(int64_t c, std::initializer_list<const void*> pointers) {
  if (c % V != 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % (V * sizeof(T)) != 0) return false;
  }
  return true;
}

// Column maps of a strip, fixed at compile time so that the strip's accumulators stay in
// registers: source column j of the strip feeds pixel target(j, b) of the strip (or -1: none)
// through tap column b.
//
// ReadCols (forward, weight gradient): output r reads input column j = r*S + b, column 0 being
// input column ow0*S - pw of the strip's first output ow0.
template <int K, int S>
struct ReadCols {
  static constexpr int kK = K;
  static constexpr int kCols = (kStrip - 1) * S + K;
  static constexpr int target(int j, int b) {
    return j >= b && (j - b) % S == 0 && (j - b) / S < kStrip ? (j - b) / S : -1;
  }
};

// GatherCols (input gradient): dx column iw0 + r gathers dy column q0 + j through tap b when
// j*S + b == r + M*S, for strips placed so that iw0 + pw is a multiple of S; then
// q0 = (iw0 + pw) / S - M and every strip has the same tap parities (so S divides kStrip).
template <int K, int S>
struct GatherCols {
  static constexpr int kK = K;
  static constexpr int kM = (K - 1) / S;
  static constexpr int kCols = (kStrip - 1) / S + kM + 1;
  static constexpr int target(int j, int b) {
    return j * S + b - kM * S >= 0 && j * S + b - kM * S < kStrip ? j * S + b - kM * S : -1;
  }
};

// Brute force over (j, b): every pixel of the strip is fed, and only columns [0, kCols) feed.
template <class Cols>
constexpr bool cols_consistent() {
  for (int j = -Cols::kK; j < Cols::kCols + Cols::kK; ++j) {
    for (int b = 0; b < Cols::kK; ++b) {
      if ((j < 0 || j >= Cols::kCols) && Cols::target(j, b) >= 0) return false;
    }
  }
  for (int r = 0; r < kStrip; ++r) {
    bool fed = false;
    for (int j = 0; j < Cols::kCols; ++j) {
      for (int b = 0; b < Cols::kK; ++b) fed = fed || Cols::target(j, b) == r;
    }
    if (!fed) return false;
  }
  return true;
}
static_assert(kStrip % 2 == 0, "GatherCols<K, 2> needs an even strip");
static_assert(cols_consistent<ReadCols<3, 1>>() && cols_consistent<ReadCols<3, 2>>() &&
              cols_consistent<ReadCols<5, 1>>() && cols_consistent<ReadCols<5, 2>>());
static_assert(cols_consistent<GatherCols<3, 1>>() && cols_consistent<GatherCols<3, 2>>() &&
              cols_consistent<GatherCols<5, 1>>() && cols_consistent<GatherCols<5, 2>>());

template <typename T, int V>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[V]) {
  const Pack<T, V> pk = load_pack<T, V>(p);
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = to_f(pk.v[v]);
}

// What the forward and the weight gradient make of a loaded pack of x (Note [Batch norm inside the
// depthwise convolution] in kernels/conv.h): PlainInput leaves it; BnActLoad<T, V, A> takes it
// for z and computes x = A((z - mean) * (invstd * gamma) + beta) for the V channels from c0,
// rounded to T, with the expression of batch_norm.cu's normalize kernel, so x equals the
// normalize kernel's bit for bit. The activation is a template argument: a run-time switch
// between the loads of a strip kept them from issuing together (the first form of this ran the
// weight gradient at 2.4x the time of the plain kernel).
struct PlainInput {
  __device__ __forceinline__ PlainInput(const BnActInput&, int) {}
  __host__ __device__ PlainInput() {}
  template <int V>
  __device__ __forceinline__ void operator()(float (&)[V]) const {}
};

// The statistics load as packs of V floats (depthwise_reads_bn_act checks their alignment).
template <typename T, int V, Activation A>
struct BnActLoad {
  float mean[V], scale[V], shift[V];
  __device__ __forceinline__ BnActLoad(const BnActInput& in, int c0) {
    auto f32 = [](const void* p) { return static_cast<const float*>(p); };
    load_floats<float, V>(f32(in.mean) + c0, mean);
    load_floats<float, V>(f32(in.invstd) + c0, scale);
    float gamma[V];
    if (in.gamma != nullptr) load_floats<float, V>(f32(in.gamma) + c0, gamma);
    if (in.beta != nullptr) load_floats<float, V>(f32(in.beta) + c0, shift);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      scale[v] *= in.gamma != nullptr ? gamma[v] : 1.0f;
      shift[v] = in.beta != nullptr ? shift[v] : 0.0f;
    }
  }
  __device__ __forceinline__ void operator()(float (&x)[V]) const {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      x[v] = to_f(from_f<T>(act_forward<A>((x[v] - mean[v]) * scale[v] + shift[v])));
    }
  }
};

// Runs launch(std::type_identity<In>{}) with the In of `bn` (PlainInput when null), each
// activation a kernel of its own: those depthwise_fuses_bn_act admits.
template <typename T, int V, typename Launch>
void with_input(const BnActInput* bn, Launch launch) {
  if (bn == nullptr) return launch(std::type_identity<PlainInput>{});
  switch (bn->act) {
    case Activation::relu:
      return launch(std::type_identity<BnActLoad<T, V, Activation::relu>>{});
    case Activation::relu6:
      return launch(std::type_identity<BnActLoad<T, V, Activation::relu6>>{});
    default:
      FRUGAL_CHECK(false, "depthwise conv: no kernel reads batch norm's input through activation ",
                   static_cast<int>(bn->act));
  }
}

}  // namespace frugal::kernels::cuda::depthwise
