// The timed GEMM algorithms (Note [Timed GEMM algorithms] in kernels/cuda/gemm_timed.h) against
// the CPU: every cuBLASLt candidate the timing may pick, the first call that times and caches,
// its rerun of the choice, unaligned operands, and the calls that are not timed (deterministic
// mode, beta = 1, a capture).
#include <cuda_runtime.h>

#include "base/deterministic.h"
#include "gpu_test_util.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_timed.h"
#include "kernels/cuda/runtime.h"
#include "kernels/matmul.h"

using namespace frugal;
using namespace frugal::gputest;

namespace {

// One row-major gemm_tf32_out call and its operands, on the device and on the CPU.
struct Problem {
  DType dtype, c_dtype;
  bool trans_a, trans_b;
  int64_t m, n, k;
  std::vector<float> a, b, ref;
  DeviceBuffer da, db, dc;

  Problem(DType t, DType ct, bool ta, bool tb, int64_t m_, int64_t n_, int64_t k_, uint32_t seed)
      : dtype(t),
        c_dtype(ct),
        trans_a(ta),
        trans_b(tb),
        m(m_),
        n(n_),
        k(k_),
        a(random_values(static_cast<size_t>(m_ * k_), seed, t)),
        b(random_values(static_cast<size_t>(k_ * n_), seed + 1, t)),
        ref(static_cast<size_t>(m_ * n_)),
        da(to_device(t, a)),
        db(to_device(t, b)),
        dc(ct, m_ * n_) {
    kernels::cpu::gemm(cpu(), DType::f32, ta, tb, m, n, k, a.data(), b.data(), 0.0, ref.data());
  }
  std::string name() const {
    return detail::str(dtype_name(dtype), "->", dtype_name(c_dtype), " m", m, " n", n, " k", k,
                       " ta", trans_a, " tb", trans_b);
  }
  kernels::cuda::ColumnMajorGemm column_major() const {
    return kernels::cuda::column_major_gemm(dtype, c_dtype, trans_a, trans_b, m, n, k, da.get(),
                                            db.get(), 0.0, dc.get(), false);
  }
  void run() const {
    kernels::cuda::gemm_tf32_out(gpu(), dtype, c_dtype, trans_a, trans_b, m, n, k, da.get(),
                                 db.get(), 0.0, dc.get(), false);
  }
  std::vector<uint8_t> output_bytes() const {
    std::vector<uint8_t> raw(dc.bytes());
    dc.download_raw(raw.data());
    return raw;
  }
};

// The shapes of the three GEMMs of a pointwise convolution (kernels/cuda/conv.cu) of `rows`
// pixels and c -> k channels: forward, input gradient, weight gradient (into f32 for 16 bits).
std::vector<Problem> pointwise_gemms(DType t, int64_t rows, int64_t c, int64_t k, uint32_t seed) {
  std::vector<Problem> p;
  p.emplace_back(t, t, false, true, rows, k, c, seed);
  p.emplace_back(t, t, false, false, rows, c, k, seed + 10);
  p.emplace_back(t, DType::f32, true, false, k, c, rows, seed + 20);
  return p;
}

}  // namespace

TEST(GpuGemmTimed, EveryCandidateMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : kDTypes) {
    for (Problem& p : pointwise_gemms(t, 6272, 96, 160, 40)) {  // a 7x7 layer at batch 128
      int ran = 0;
      for (int i = 0; i < kernels::cuda::kTimedGemmCandidates; ++i) {
        SCOPED_TRACE(detail::str(p.name(), " candidate ", i));
        p.dc.poison();
        if (!kernels::cuda::run_gemm_candidate(gpu(), p.column_major(), i)) break;
        EXPECT_CLOSE(p.dc.download(), p.ref, tolerance(t));
        ++ran;
      }
      EXPECT_GE(ran, 1) << p.name() << ": cuBLASLt offered no candidate";
    }
  }
}

TEST(GpuGemmTimed, FirstCallTimesCachesAndKeepsItsChoice) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard timed(false);
  kernels::cuda::forget_gemm_algorithms();
  for (DType t : kDTypes) {
    for (Problem& p : pointwise_gemms(t, 1568, 144, 24, 50)) {
      SCOPED_TRACE(p.name());
      EXPECT_EQ(kernels::cuda::timed_gemm_choice(gpu(), p.column_major()), "");
      p.dc.poison();
      p.run();  // times and caches
      EXPECT_NE(kernels::cuda::timed_gemm_choice(gpu(), p.column_major()), "");
      EXPECT_CLOSE(p.dc.download(), p.ref, tolerance(t));
      const std::vector<uint8_t> first = p.output_bytes();
      p.dc.poison();
      p.run();  // the cached choice: the same bits as the first call's rerun of it
      EXPECT_EQ(p.output_bytes(), first);
    }
  }
  Problem p(DType::f16, DType::f16, false, true, 512, 64, 96, 60);
  p.run();
  EXPECT_NE(kernels::cuda::timed_gemm_choice(gpu(), p.column_major()), "");
  kernels::cuda::forget_gemm_algorithms();
  EXPECT_EQ(kernels::cuda::timed_gemm_choice(gpu(), p.column_major()), "");
}

TEST(GpuGemmTimed, UnalignedOperandsAreTimedApart) {
  SKIP_WITHOUT_GPU();
  DeterministicGuard timed(false);
  kernels::cuda::forget_gemm_algorithms();
  for (DType t : {DType::f16, DType::f32}) {
    const int64_t m = 200, n = 72, k = 136;
    Problem p(t, t, false, false, m, n, k, 70);
    p.run();  // the aligned problem, timed first
    const std::string aligned = kernels::cuda::timed_gemm_choice(gpu(), p.column_major());
    ASSERT_NE(aligned, "");
    // The same product one element past each buffer's start (DeviceBuffer keeps 16 bytes spare).
    DeviceBuffer da(t, m * k + 1), db(t, k * n + 1), dc(t, m * n + 1);
    std::vector<float> a1(p.a), b1(p.b);
    a1.insert(a1.begin(), 0.0f);
    b1.insert(b1.begin(), 0.0f);
    da.upload(a1);
    db.upload(b1);
    dc.poison();
    const size_t e = dtype_size(t);
    auto* a_off = static_cast<char*>(da.get()) + e;
    auto* b_off = static_cast<char*>(db.get()) + e;
    auto* c_off = static_cast<char*>(dc.get()) + e;
    SCOPED_TRACE(detail::str(dtype_name(t), " offset by one element"));
    kernels::cuda::gemm_tf32_out(gpu(), t, t, false, false, m, n, k, a_off, b_off, 0.0, c_off,
                                 false);
    const auto unaligned = kernels::cuda::column_major_gemm(t, t, false, false, m, n, k, a_off,
                                                            b_off, 0.0, c_off, false);
    EXPECT_NE(kernels::cuda::timed_gemm_choice(gpu(), unaligned), "");
    std::vector<float> out = dc.download();
    out.erase(out.begin());
    EXPECT_CLOSE(out, p.ref, tolerance(t));
  }
}

TEST(GpuGemmTimed, NotTimedWhenDeterministicAccumulatingOrCaptured) {
  SKIP_WITHOUT_GPU();
  kernels::cuda::forget_gemm_algorithms();
  Problem p(DType::f16, DType::f16, false, true, 392, 48, 80, 80);
  {
    DeterministicGuard fixed(true);
    p.run();
    EXPECT_CLOSE(p.dc.download(), p.ref, tolerance(DType::f16));
    EXPECT_EQ(kernels::cuda::timed_gemm_choice(gpu(), p.column_major()), "");
  }
  DeterministicGuard timed(false);
  // beta = 1 adds into c: c = ref + ref
  kernels::cuda::gemm_tf32_out(gpu(), p.dtype, p.c_dtype, p.trans_a, p.trans_b, p.m, p.n, p.k,
                               p.da.get(), p.db.get(), 1.0, p.dc.get(), false);
  std::vector<float> twice(p.ref);
  for (float& v : twice) v *= 2.0f;
  EXPECT_CLOSE(p.dc.download(), twice, tolerance(DType::f16));
  EXPECT_EQ(kernels::cuda::timed_gemm_choice(gpu(), p.column_major()), "");
  // A first call inside a capture runs GemmEx's pick into the graph and caches nothing.
  auto stream = static_cast<cudaStream_t>(kernels::cuda::compute_stream(Device::cuda(0)));
  p.dc.poison();
  kernels::cuda::synchronize(Device::cuda(0));
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  p.run();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(kernels::cuda::timed_gemm_choice(gpu(), p.column_major()), "");
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_CLOSE(p.dc.download(), p.ref, tolerance(DType::f16));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  p.run();  // outside the capture: timed now
  EXPECT_NE(kernels::cuda::timed_gemm_choice(gpu(), p.column_major()), "");
  EXPECT_CLOSE(p.dc.download(), p.ref, tolerance(DType::f16));
}
