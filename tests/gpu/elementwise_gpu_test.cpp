// CUDA vs CPU: broadcasting binary ops, affine, activations (both directions), casts and fills,
// in f32, f16 and bf16, on odd sizes and on unaligned pointers (the scalar path).
#include "gpu_test_util.h"

using namespace frugal;
using namespace frugal::gputest;

namespace {

void check_binary(DType t, kernels::BinaryOp op, const Shape& out, const Shape& as,
                  const Shape& bs) {
  SCOPED_TRACE(detail::str(dtype_name(t), " op ", static_cast<int>(op), " ", as, " ", bs));
  auto a = random_values(static_cast<size_t>(as.numel()), 1, t, -2, 2);
  auto b = random_values(static_cast<size_t>(bs.numel()), 2, t, 0.5f, 2);
  for (size_t i = 0; i < b.size(); i += 3) b[i] = -b[i];  // signs, still away from zero
  kernels::Broadcast bc = kernels::make_broadcast(out, as, bs);
  std::vector<float> ref(static_cast<size_t>(out.numel()));
  kernels::cpu::binary(cpu(), op, DType::f32, bc, a.data(), b.data(), ref.data());
  DeviceBuffer da = to_device(t, a), db = to_device(t, b), dout(t, out.numel());
  dout.poison();
  kernels::cuda::binary(gpu(), op, t, bc, da.get(), db.get(), dout.get());
  EXPECT_CLOSE(dout.download(), ref, tolerance(t));
}

}  // namespace

TEST(GpuElementwise, BinaryBroadcastMatchesCpu) {
  SKIP_WITHOUT_GPU();
  using kernels::BinaryOp;
  for (DType t : kDTypes) {
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
      check_binary(t, op, {3, 5, 7, 9}, {3, 5, 7, 9}, {3, 5, 7, 9});  // plain, vectorised
      check_binary(t, op, {3, 5, 7, 9}, {3, 5, 7, 9}, {9});           // per channel
      check_binary(t, op, {3, 5, 7, 9}, {3, 5, 7, 9}, {5, 1, 1});
      check_binary(t, op, {3, 5, 7, 9}, {3, 1, 7, 1}, {1, 5, 1, 9});  // both broadcast
      check_binary(t, op, {1031}, {1031}, {1});                       // scalar
      // Packed broadcasts (Note [Packed broadcasts]): squeeze-excitation's scale, either side
      check_binary(t, op, {4, 5, 7, 16}, {4, 5, 7, 16}, {4, 1, 1, 16});
      check_binary(t, op, {3, 6, 5, 24}, {3, 1, 1, 24}, {3, 6, 5, 24});
      check_binary(t, op, {4, 3, 5, 8}, {4, 3, 5, 8}, {4, 1, 1, 1});  // per-sample mask
      check_binary(t, op, {3, 5, 8}, {3, 5, 8}, {5, 1});              // broadcast along the packs
      check_binary(t, op, {4, 3136, 32}, {4, 1, 32}, {4, 3136, 32});  // many packs
    }
  }
}

TEST(GpuElementwise, AffineAndActivationsMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1031;
  for (DType t : kDTypes) {
    auto x = random_values(n, 3, t, -8, 8);
    auto dy = random_values(n, 4, t, -1, 1);
    DeviceBuffer dx_in = to_device(t, x), ddy = to_device(t, dy), dout(t, n);
    for (int shift : {0, 1}) {  // shift 1: pointers off 16-byte alignment, scalar path
      SCOPED_TRACE(detail::str(dtype_name(t), " shift ", shift));
      size_t es = dtype_size(t);
      auto dev = [&](const DeviceBuffer& b) { return static_cast<char*>(b.get()) + shift * es; };
      int64_t m = n - shift;
      std::vector<float> ref(static_cast<size_t>(m));
      auto got = [&] {
        std::vector<float> all = dout.download();
        return std::vector<float>(all.begin() + shift, all.begin() + shift + m);
      };
      dout.poison();
      kernels::cpu::affine(cpu(), DType::f32, m, x.data() + shift, -1.5, 0.25, ref.data());
      kernels::cuda::affine(gpu(), t, m, dev(dx_in), -1.5, 0.25, dev(dout));
      EXPECT_CLOSE(got(), ref, tolerance(t));
      for (int a = 0; a < kernels::kNumActivations; ++a) {
        auto act = static_cast<kernels::Activation>(a);
        SCOPED_TRACE(detail::str("activation ", a));
        dout.poison();
        kernels::cpu::activation_forward(cpu(), act, DType::f32, m, x.data() + shift, ref.data());
        kernels::cuda::activation_forward(gpu(), act, t, m, dev(dx_in), dev(dout));
        EXPECT_CLOSE(got(), ref, tolerance(t));
        dout.poison();
        kernels::cpu::activation_backward(cpu(), act, DType::f32, m, x.data() + shift,
                                          dy.data() + shift, ref.data());
        kernels::cuda::activation_backward(gpu(), act, t, m, dev(dx_in), dev(ddy), dev(dout));
        EXPECT_CLOSE(got(), ref, tolerance(t));
      }
    }
  }
}

TEST(GpuElementwise, CastRoundsToNearestEvenExactly) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1029;
  for (DType from : kDTypes) {
    for (DType to : kDTypes) {
      SCOPED_TRACE(detail::str(dtype_name(from), " -> ", dtype_name(to)));
      auto x = random_values(n, 5, from, -300, 300);
      DeviceBuffer dx = to_device(from, x), dy(to, n);
      dy.poison();
      kernels::cuda::cast(gpu(), from, to, n, dx.get(), dy.get());
      std::vector<float> y = dy.download();
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) bad += y[i] != round_to(to, x[i]);
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST(GpuElementwise, FillWritesEveryDtype) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1001;
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i64, DType::u8}) {
    for (double value : {0.0, 2.5, 7.0}) {
      SCOPED_TRACE(detail::str(dtype_name(t), " ", value));
      DeviceBuffer d(t, n);
      d.poison();
      kernels::cuda::fill(gpu(), t, n, d.get(), value);
      std::vector<uint8_t> got(d.bytes()), want(d.bytes());
      d.download_raw(got.data());
      kernels::cpu::fill(cpu(), t, n, want.data(), value);
      EXPECT_EQ(got, want);
    }
  }
}

TEST(GpuElementwise, AddI64MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 70001;  // more than one grid-stride pass of small grids
  std::vector<int64_t> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = i * 1000003 - (int64_t{1} << 41);
  DeviceBuffer d(DType::i64, n);
  d.upload_raw(want.data());
  kernels::cuda::add_i64(gpu(), n, d.as<int64_t>(), -17);
  kernels::cpu::add_i64(cpu(), n, want.data(), -17);
  d.download_raw(got.data());
  EXPECT_EQ(got, want);
}

TEST(GpuElementwise, F64IsCpuOnlyAndEmptyIsFine) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer d(DType::f32, 4);
  EXPECT_THROW(kernels::cuda::affine(gpu(), DType::f64, 4, d.get(), 1, 0, d.get()), Error);
  kernels::cuda::affine(gpu(), DType::f32, 0, nullptr, 1, 0, nullptr);
  kernels::cuda::synchronize(Device::cuda(0));
}

// NaN passes every activation both ways, as on the CPU and in PyTorch (a NaN from an overflow
// must reach the loss and the gradients for the scaler to skip the step), and the kinks and the
// infinities of relu and relu6 land where the CPU's do. The output starts at zeros, not at the
// NaN poison, so a NaN read back was written.
TEST(GpuElementwise, ActivationsKeepNaNAndMatchTheCpuAtKinksAndInfinities) {
  SKIP_WITHOUT_GPU();
  for (DType t : kDTypes) {
    for (int a = 0; a < kernels::kNumActivations; ++a) {
      auto act = static_cast<kernels::Activation>(a);
      SCOPED_TRACE(detail::str(dtype_name(t), " activation ", a));
      std::vector<float> x{NAN, -3.0f, -1.0f, -0.0f, 0.0f, 0.5f, 3.0f, 6.0f, 7.0f};
      // silu's and hardswish's infinities are NaN on one side and a limit on the other, in
      // PyTorch as here; relu's and relu6's are clamps, exact everywhere.
      if (act == kernels::Activation::relu || act == kernels::Activation::relu6) {
        x.insert(x.end(), {INFINITY, -INFINITY});
      }
      const int64_t n = static_cast<int64_t>(x.size());
      std::vector<float> dy(x.size(), 1.5f), ref(x.size()), zeros(x.size(), 0.0f);
      DeviceBuffer dx_in = to_device(t, x), ddy = to_device(t, dy), dout = to_device(t, zeros);
      kernels::cpu::activation_forward(cpu(), act, DType::f32, n, x.data(), ref.data());
      for (float& v : ref) v = round_to(t, v);
      kernels::cuda::activation_forward(gpu(), act, t, n, dx_in.get(), dout.get());
      EXPECT_CLOSE_KEEPING_SPECIALS(dout.download(), ref, tolerance(t));
      EXPECT_TRUE(std::isnan(dout.download()[0])) << "forward at NaN";
      dout.upload(zeros);
      kernels::cpu::activation_backward(cpu(), act, DType::f32, n, x.data(), dy.data(), ref.data());
      for (float& v : ref) v = round_to(t, v);
      kernels::cuda::activation_backward(gpu(), act, t, n, dx_in.get(), ddy.get(), dout.get());
      EXPECT_CLOSE_KEEPING_SPECIALS(dout.download(), ref, tolerance(t));
    }
  }
}
