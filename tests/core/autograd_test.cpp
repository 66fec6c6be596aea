// The autograd engine: accumulation, no-grad, retain_graph, errors, and eager freeing of saved
// tensors (live bytes return to the baseline after backward).
#include "core/autograd.h"

#include <gtest/gtest.h>

#include "common/error_of.h"
#include "core/factory.h"
#include "core/ops.h"
#include "memory/allocator.h"
#include "nn/functional.h"

using namespace frugal;
using frugal::test::error_of;

namespace {
int64_t live_cpu_bytes() { return memory::cpu_allocator().stats().allocated_bytes.current; }
}  // namespace

TEST(Autograd, GradientOfATensorUsedTwiceAccumulates) {
  Tensor x = full({3}, 2.0, {.requires_grad = true});
  Tensor y = sum(add(mul(x, x), mul(x, 3.0)));  // dy/dx = 2x + 3 = 7
  y.backward();
  for (double g : x.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 7.0);
  // A second backward on a new graph adds into .grad, as PyTorch does.
  sum(x).backward();
  for (double g : x.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 8.0);
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

// As PyTorch: a leaf frozen after the forward that used it gets no gradient from backward, while
// the other leaves of the same graph do.
TEST(Autograd, ALeafFrozenAfterTheForwardGetsNoGradient) {
  Tensor w = full({3}, 1.5, {.requires_grad = true});
  Tensor v = full({3}, 2.0, {.requires_grad = true});
  Tensor loss = sum(mul(w, v));
  w.requires_grad_(false);
  loss.backward();
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(v.grad().to_vector(), (std::vector<double>{1.5, 1.5, 1.5}));
}

// A .grad of another dtype is refused (PyTorch: "assigned grad has data of a different type"):
// backward would add its f32 gradients to an f64 one and leave .grad f64.
TEST(Autograd, SetGradRefusesAnotherDtype) {
  Tensor w = full({3}, 1.0, {.requires_grad = true});
  const std::string msg = error_of([&] { w.set_grad(full({3}, 1.0, {.dtype = DType::f64})); });
  EXPECT_NE(msg.find("set_grad"), std::string::npos) << msg;
  EXPECT_FALSE(w.grad().defined());
}

TEST(Autograd, BackwardWithExplicitGradientForNonScalar) {
  Tensor x = full({2, 2}, 1.0, {.requires_grad = true});
  Tensor y = mul(x, 5.0);
  y.backward(from_vector({1, 2, 3, 4}, Shape{2, 2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{5, 10, 15, 20}));
}

// As PyTorch's engine: a seed of another dtype is cast to the output's. An f32 seed for an f16
// matmul used to reach the matmul's backward as is, which read the f16 operand's bytes as f32.
TEST(Autograd, ASeedOfAnotherDtypeTakesTheOutputsDtype) {
  for (DType low : {DType::f16, DType::bf16}) {
    Generator gen(1);
    Tensor a = randn({2, 3}, gen, {.dtype = low, .requires_grad = true});
    Tensor b = randn({3, 4}, gen, {.dtype = low});
    Tensor a2 = a.detach().clone().requires_grad_();
    matmul(a, b).backward(ones({2, 4}));  // f32 seed
    matmul(a2, b).backward(ones({2, 4}, {.dtype = low}));
    EXPECT_EQ(a.grad().to_vector(), a2.grad().to_vector()) << dtype_name(low);
  }
}

// The leaf's .grad is its own: not the tensor the caller seeded backward with, and not the
// other leaf's when one gradient reaches two (a + b passes the same tensor to both).
TEST(Autograd, ALeafsGradSharesNoBytesWithTheSeedOrAnotherLeaf) {
  Tensor x = zeros({3}, {.requires_grad = true});
  Tensor g = ones({3});
  x.clone().backward(g);
  fill_(g, 7.0);
  EXPECT_EQ(x.grad().to_vector(), std::vector<double>(3, 1.0));

  Tensor a = zeros({3}, {.requires_grad = true}), b = zeros({3}, {.requires_grad = true});
  sum(add(a, b)).backward();
  fill_(a.grad(), 5.0);  // as GradScaler::unscale_ writes each parameter's gradient in place
  EXPECT_EQ(b.grad().to_vector(), std::vector<double>(3, 1.0));
}

TEST(Autograd, NonScalarBackwardWithoutGradientIsAnError) {
  Tensor x = ones({2, 3}, {.requires_grad = true});
  Tensor y = mul(x, 2.0);
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("backward: grad can be implicitly created only for scalar outputs"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("[2, 3] f32 cpu"), std::string::npos) << msg;
  }
  Tensor c = ones({2});
  EXPECT_THROW(c.backward(), Error);  // does not require grad
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = ones({2}, {.requires_grad = true});
  {
    autograd::NoGradGuard guard;
    EXPECT_FALSE(autograd::grad_enabled());
    Tensor y = mul(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = full({2}, 3.0, {.requires_grad = true});
  Tensor y = sum(mul(x, x));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  for (double g : x.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 12.0);
  Tensor z = sum(mul(x, x));
  z.backward();
  try {
    z.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

TEST(Autograd, DetachStopsGradient) {
  Tensor x = full({2}, 3.0, {.requires_grad = true});
  Tensor y = sum(mul(x.detach(), x));
  y.backward();
  for (double g : x.grad().to_vector()) EXPECT_DOUBLE_EQ(g, 3.0);
}

TEST(Autograd, BackwardFreesSavedTensorsAndIntermediateGradients) {
  Generator gen(1);
  Tensor w = randn({8, 3, 3, 4}, gen, {.requires_grad = true});
  Tensor x = randn({4, 16, 16, 4}, gen);
  // Warm up so lazily created state (accumulators) does not count.
  const int64_t before = live_cpu_bytes();
  {
    Tensor h = nn::functional::conv2d(x, w, Tensor(), {.padding = 1});
    h = nn::functional::relu6(h);
    h = nn::functional::batch_norm(h, ones({8}), zeros({8}), Tensor(), Tensor());
    Tensor loss = mean(mul(h, h));
    const int64_t during = live_cpu_bytes();
    // Note [Saved tensors]: relu6 saves its output, which batch_norm saves as its input (one
    // storage), the conv output is gone, and h (alive here) is a recipe for mul, not a copy.
    const int64_t act_bytes = 4 * 16 * 16 * 8 * 4;
    EXPECT_GT(during - before, 2 * act_bytes) << "forward should hold activations";
    EXPECT_LT(during - before, 3 * act_bytes) << "one tensor per layer, each stored once";
    loss.backward();
    // After backward only the graph's outputs and w.grad remain: the saved activations are gone
    // although h and loss are still alive.
    const int64_t after = live_cpu_bytes();
    const int64_t h_bytes = static_cast<int64_t>(h.nbytes());
    const int64_t grad_bytes = static_cast<int64_t>(w.grad().nbytes());
    EXPECT_LE(after - before, h_bytes + grad_bytes + 4096);
  }
  w.zero_grad();
  EXPECT_EQ(live_cpu_bytes(), before);
}

TEST(Autograd, MetaTensorsTrackBytesWithoutData) {
  const int64_t before = memory::meta_allocator().stats().allocated_bytes.current;
  Tensor x = zeros({8, 32, 32, 3}, {.device = Device::meta()});
  Tensor w = zeros({16, 3, 3, 3}, {.device = Device::meta(), .requires_grad = true});
  Tensor y = nn::functional::conv2d(x, w, Tensor(), {.stride = 2, .padding = 1});
  EXPECT_EQ(y.shape(), (Shape{8, 16, 16, 16}));
  EXPECT_EQ(y.device(), Device::meta());
  EXPECT_EQ(memory::meta_allocator().stats().allocated_bytes.current - before,
            static_cast<int64_t>(x.nbytes() + w.nbytes() + y.nbytes()));
  sum(y).backward();
  EXPECT_EQ(w.grad().shape(), w.shape());
}

TEST(Autograd, OldStyleClosuresThatCaptureTheirTensorsStillWork) {
  // The extension path before saved lists: the closure captures autograd::save(x) itself.
  Tensor x = full({3}, 2.0, {.requires_grad = true});
  Tensor xd = x.detach();
  Tensor y =
      autograd::record("cube", {x}, mul(mul(xd, xd), xd),
                       [x_saved = autograd::save(x)](const std::vector<Tensor>& g) {
                         return std::vector<Tensor>{mul(mul(mul(x_saved, x_saved), 3.0), g[0])};
                       });
  sum(y).backward();
  for (double v : x.grad().to_vector()) EXPECT_DOUBLE_EQ(v, 12.0);
}

// An in-place write has no gradient: into a tensor autograd computes a gradient for, it left that
// gradient wrong (fill_(y, 5) after y = 2x, and x.grad stayed [2, 2, 2]). Refused with grad mode
// on, as PyTorch refuses it for a leaf; allowed under NoGradGuard, as under torch.no_grad().
TEST(Autograd, InPlaceWritesIntoTensorsThatRequireGradAreRefused) {
  Tensor x = full({3}, 1.0, {.requires_grad = true});
  Tensor y = mul(x, 2.0);
  EXPECT_THROW(fill_(y, 5.0), Error);
  EXPECT_THROW(copy_(x, zeros({3})), Error);
  EXPECT_THROW(fill_(x, 0.0), Error);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 2, 2}));
  {
    autograd::NoGradGuard no_grad;
    copy_(x, full({3}, 4.0));
    fill_(y, 5.0);
  }
  EXPECT_EQ(x.to_vector(), (std::vector<double>{4, 4, 4}));
  Tensor plain = zeros({3});  // no gradient to keep right
  fill_(plain, 1.0);
  EXPECT_EQ(plain.to_vector(), (std::vector<double>{1, 1, 1}));
}

// A gradient may reach an input in another dtype (Note [Gradient dtypes]): matmul's backward
// casts it to its operands' dtype (its GEMMs read f64 bytes as f32 and past the end), and a leaf
// keeps its own dtype. A gradient of another size or device is refused before anything reads it.
TEST(Autograd, GradientsOfAnotherDtypeAreReadAsTheirsAndOfAnotherSizeRefused) {
  Tensor a = full({2, 3}, 1.0, {.requires_grad = true});
  Tensor b = full({3, 2}, 2.0, {.requires_grad = true});
  Tensor h = matmul(a, b);
  Tensor y =
      autograd::record("in_f64", {h}, mul(h.detach(), 2.0), [](const std::vector<Tensor>& g) {
        return std::vector<Tensor>{mul(cast(g[0], DType::f64), 2.0)};  // f64 for an f32 input
      });
  sum(y).backward();
  ASSERT_EQ(a.grad().dtype(), DType::f32);
  EXPECT_EQ(a.grad().to_vector(), std::vector<double>(6, 8.0));  // 2 * (2 + 2)
  EXPECT_EQ(b.grad().to_vector(), std::vector<double>(6, 4.0));  // 2 * (1 + 1)

  Tensor z = full({3}, 1.0, {.requires_grad = true});
  Tensor w =
      autograd::record("too_short", {z}, mul(z.detach(), 2.0),
                       [](const std::vector<Tensor>&) { return std::vector<Tensor>{zeros({2})}; });
  EXPECT_NE(error_of([&] { sum(w).backward(); }).find("'too_short' returned for its input 0"),
            std::string::npos);
  Tensor on_meta = full({3}, 1.0, {.device = Device::meta()});
  EXPECT_NE(error_of([&] { w.backward(on_meta); }).find("is not on cpu"), std::string::npos);
}

// requires_grad_(true) on a computed tensor is a no-op, as in PyTorch (it threw); turning it off
// is refused, naming detach().
TEST(Autograd, RequiresGradOnAComputedTensorIsANoOpAndOffIsRefused) {
  Tensor w = full({2}, 1.0).requires_grad_(true);
  Tensor y = mul(w, 3.0);
  EXPECT_TRUE(y.requires_grad_(true).requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_NE(error_of([&] { y.requires_grad_(false); }).find("use detach()"), std::string::npos);
  sum(y).backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{3, 3}));
}

// A second backward adds into .grad in place, as PyTorch's AccumulateGrad: a handle taken before
// sees the sum (it kept the first gradient, and a new buffer was allocated each time).
TEST(Autograd, AccumulationAddsIntoTheGradientInPlace) {
  Tensor w = full({2}, 1.0).requires_grad_(true);
  sum(mul(w, 3.0)).backward();
  const Tensor held = w.grad();
  const uint64_t version = held.version();
  sum(mul(w, 3.0)).backward();
  EXPECT_TRUE(held.same(w.grad()));
  EXPECT_EQ(held.to_vector(), (std::vector<double>{6, 6}));
  EXPECT_GT(held.version(), version);
}
