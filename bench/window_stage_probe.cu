// Do the depthwise row windows run faster when each step's input row is staged in shared memory
// one or two steps ahead (Note [Windows stage rows ahead] in kernels/cuda/depthwise_windows.cuh)?
// The windows are among the kernels of MobileNetV2's f16 step that stand furthest above the time
// plain copies of their bytes take (bench/RESULTS.md). This runs the library's own launcher,
// forward_window, for kAhead 0, 1 and 2 on every stride-1 3x3 depthwise layer of MobileNetV2 at
// batch 128, 224x224: the forward, which reads batch norm's output through ReLU6 as the step
// does, and the input gradient (mirrored taps, plain input). Each kAhead must give kAhead 0's
// output bit for bit. Times are medians over replayed CUDA graphs that rotate among enough input
// sets to keep a round above twice the 50 MB L2. Prints a line per layer and pass, then the sums;
// exits 1 on a differing output. (Session 36 timed the weight gradient by rows staged the same
// way too: slower, and backed out; bench/RESULTS.md.)
//   build-gpu/window_stage_probe [f16|bf16|f32]
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/context.h"
#include "kernels/cuda/depthwise_windows.cuh"
#include "probe_common.cuh"

namespace {

using frugal::Device;
using frugal::kernels::Activation;
using frugal::kernels::BnActInput;
using frugal::kernels::Context;
using frugal::kernels::Conv2dShape;
namespace fk = frugal::kernels::cuda;
using probe::check;

constexpr int kAheads = 3;  // 0, 1, 2

struct Layer {
  int hw, c, count;  // input and output H = W, channels, how many of MobileNetV2's layers
};
// MobileNetV2's stride-1 3x3 depthwise layers at 224x224: 13 of them.
constexpr Layer kLayers[] = {{112, 32, 1}, {56, 144, 1}, {28, 192, 2},
                             {14, 384, 4}, {14, 576, 2}, {7, 960, 3}};

enum class Pass { forward, input_gradient };
constexpr Pass kPasses[] = {Pass::forward, Pass::input_gradient};
const char* pass_name(Pass p) { return p == Pass::forward ? "forward" : "input gradient"; }

Conv2dShape shape_of(const Layer& l) {
  Conv2dShape s;
  s.n = 128, s.h = s.w = l.hw, s.c = s.k = s.groups = l.c;
  s.kh = s.kw = 3, s.pad_h = s.pad_w = 1;
  return s;
}

template <typename T>
std::vector<T> random_values(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(rng));
  return v;
}

// One input set: a (batch norm's input z, or dy for the input gradient) and the output y.
template <typename T>
struct Set {
  T *a, *y;
};

template <typename T>
struct Run {
  Conv2dShape s;
  Pass pass;
  std::vector<Set<T>> sets;
  T* w;
  BnActInput bn;
};

template <typename T>
using ReluSixLoad = fk::BnActLoad<T, fk::kWindowPack, Activation::relu6>;

// kAhead's pass on one set, through the library's launcher.
template <typename T, int kAhead>
void launch(const Context& ctx, cudaStream_t stream, const Run<T>& r, const Set<T>& set) {
  switch (r.pass) {
    case Pass::forward:
      return fk::forward_window<T, ReluSixLoad<T>, false, kAhead>(ctx, stream, r.s, r.bn, set.a,
                                                                  r.w, nullptr, set.y);
    case Pass::input_gradient:
      return fk::forward_window<T, fk::PlainInput, true, kAhead>(ctx, stream, r.s, BnActInput{},
                                                                 set.a, r.w, nullptr, set.y);
  }
}

template <typename T>
void launch_ahead(int ahead, const Context& ctx, cudaStream_t stream, const Run<T>& r,
                  const Set<T>& set) {
  switch (ahead) {
    case 0:
      return launch<T, 0>(ctx, stream, r, set);
    case 1:
      return launch<T, 1>(ctx, stream, r, set);
    default:
      return launch<T, 2>(ctx, stream, r, set);
  }
}

// The output of set 0 as bytes.
template <typename T>
std::vector<char> output_of(const Run<T>& r, size_t elems) {
  std::vector<char> out(elems * sizeof(T));
  check(cudaMemcpy(out.data(), r.sets[0].y, out.size(), cudaMemcpyDeviceToHost), "download");
  return out;
}

template <typename T>
int run_all(const char* dtype) {
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  Context ctx = Context::of(Device::cuda(0));
  ctx.stream = stream;
  std::mt19937 rng(7);
  std::printf("%s, batch 128: us a launch for kAhead = 0 / 1 / 2 (ratio to 0), MB moved\n", dtype);
  double total[2][kAheads] = {};
  int failures = 0;
  for (const Layer& l : kLayers) {
    for (Pass pass : kPasses) {
      Run<T> r{shape_of(l), pass, {}, nullptr, {}};
      const size_t elems = static_cast<size_t>(r.s.n * r.s.h * r.s.w * r.s.c);
      const double mb = 2.0 * static_cast<double>(elems * sizeof(T)) / 1e6;  // a in, y out
      const int sets = std::max(1, static_cast<int>(200.0 / mb + 0.999));
      const auto host_a = random_values<T>(elems, rng, -2.0f, 2.0f);
      for (int i = 0; i < sets; ++i) {
        Set<T> set{probe::device_copy(host_a), nullptr};
        check(cudaMalloc(&set.y, elems * sizeof(T)), "malloc");
        r.sets.push_back(set);
      }
      r.w = probe::device_copy(random_values<T>(static_cast<size_t>(l.c * 9), rng, -0.5f, 0.5f));
      // batch norm's statistics and affine parameters, f32 [C]
      float* stats[4];
      const float bounds[4][2] = {{-0.5f, 0.5f}, {0.5f, 2.0f}, {0.5f, 1.5f}, {-0.5f, 0.5f}};
      for (int k = 0; k < 4; ++k) {
        stats[k] = probe::device_copy(random_values<float>(l.c, rng, bounds[k][0], bounds[k][1]));
      }
      r.bn = BnActInput{Activation::relu6, stats[0], stats[1], stats[2], stats[3]};
      std::vector<char> reference;
      float us[kAheads];
      for (int a = 0; a < kAheads; ++a) {
        launch_ahead(a, ctx, stream, r, r.sets[0]);
        check(cudaStreamSynchronize(stream), "run");
        std::vector<char> out = output_of(r, elems);
        if (a == 0) {
          reference = std::move(out);
        } else if (out != reference) {
          std::printf("  %dx%dx%d %s: kAhead %d differs from kAhead 0\n", l.hw, l.hw, l.c,
                      pass_name(pass), a);
          ++failures;
        }
        us[a] = probe::graph_median_us(
            stream, r.sets, [&](const Set<T>& set) { launch_ahead(a, ctx, stream, r, set); });
        total[static_cast<int>(pass)][a] += us[a] * l.count;
      }
      std::printf("  %3dx%-3dx%-4d x%d %-14s %8.1f %8.1f (%.3f) %8.1f (%.3f)  %6.1f MB\n", l.hw,
                  l.hw, l.c, l.count, pass_name(pass), us[0], us[1], us[1] / us[0], us[2],
                  us[2] / us[0], mb);
      for (auto& set : r.sets) {
        check(cudaFree(set.a), "free");
        check(cudaFree(set.y), "free");
      }
      check(cudaFree(r.w), "free");
      for (float* p : stats) check(cudaFree(p), "free");
    }
  }
  for (Pass pass : kPasses) {
    const double* t = total[static_cast<int>(pass)];
    std::printf("  all 13 %-14s of a step: %.1f / %.1f (%.3f) / %.1f (%.3f) us\n", pass_name(pass),
                t[0], t[1], t[1] / t[0], t[2], t[2] / t[0]);
  }
  check(cudaStreamDestroy(stream), "stream");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dtype = argc > 1 ? argv[1] : "f16";
  if (dtype == "f16") return run_all<__half>("f16");
  if (dtype == "bf16") return run_all<__nv_bfloat16>("bf16");
  if (dtype == "f32") return run_all<float>("f32");
  std::fprintf(stderr, "usage: window_stage_probe [f16|bf16|f32]\n");
  return 2;
}
