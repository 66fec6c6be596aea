// Model files: PyTorch's OIHW conv layout at the file boundary, bit-exact round trips, and
// mismatched files rejected naming the tensor with the model left bit-for-bit unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "file_test_util.h"
#include "nn/layers.h"
#include "train/checkpoint.h"

using namespace frugal;
using frugal::test::error_of;
using frugal::test::expect_mentions;
using frugal::test::ScratchFile;

namespace {

nn::NamedTensors state_of(const nn::Module& m) {
  nn::NamedTensors all = m.named_parameters();
  for (auto& b : m.named_buffers()) all.push_back(b);
  return all;
}

// Sequential(Conv2d(3, 4, 3), BatchNorm2d(4), Linear(5, 2)) with every tensor seed-dependent,
// BatchNorm's included.
std::shared_ptr<nn::Sequential> small_model(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(3, 4, 3), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::Linear>(5, 2)});
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>((*m)[1]);
  Generator gen(seed + 100);
  autograd::NoGradGuard no_grad;  // parameters are written as under torch.no_grad()
  copy_(bn->weight, randn({4}, gen));
  copy_(bn->bias, randn({4}, gen));
  copy_(bn->running_mean, randn({4}, gen));
  copy_(bn->running_var, rand({4}, gen, {}, 0.5, 2.0));
  fill_(bn->num_batches_tracked, static_cast<double>(seed * 10 + 3));
  return m;
}

// torch's element [k][c][i][j] of the hand-made OIHW weight.
float torch_value(int64_t k, int64_t c, int64_t i, int64_t j) {
  return static_cast<float>(1000 * k + 100 * c + 10 * i + j) + 0.5f;
}

}  // namespace

TEST(ModelFile, LoadsATorchLayoutConvWeightAndWritesItBack) {
  const int64_t K = 3, C = 2, R = 3;  // Conv2d(2, 3, 3): torch weight [3, 2, 3, 3]
  std::vector<float> w;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < R; ++j) w.push_back(torch_value(k, c, i, j));
  std::string json = R"({"weight":{"dtype":"F32","shape":[3,2,3,3],"data_offsets":[0,216]},)"
                     R"("bias":{"dtype":"F32","shape":[3],"data_offsets":[216,228]}})";
  ScratchFile f("torch");
  test::write_bytes(
      f.path(), test::safetensors_bytes(json, test::f32_bytes(w) + test::f32_bytes({0.5f, -1, 2})));
  manual_seed(5);
  nn::Conv2d conv(2, 3, 3);
  train::load_model(f.path(), conv);
  ASSERT_EQ(conv.weight.shape(), (Shape{K, R, R, C}));  // OHWI
  const float* p = conv.weight.data<float>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < R; ++j)
        for (int64_t c = 0; c < C; ++c) {
          EXPECT_EQ(p[((k * R + i) * R + j) * C + c], torch_value(k, c, i, j))
              << "k=" << k << " c=" << c << " i=" << i << " j=" << j;
        }
  EXPECT_EQ(conv.bias.to_vector(), (std::vector<double>{0.5, -1, 2}));

  // And back: the saved file holds torch's layout, byte for byte what torch wrote.
  ScratchFile g("back");
  train::save_model(g.path(), conv);
  auto [tensors, md] = train::load_safetensors(g.path());
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  EXPECT_EQ(by_name.at("weight").shape(), (Shape{K, C, R, R}));
  EXPECT_EQ(test::tensor_bytes(by_name.at("weight")), test::f32_bytes(w));
}

TEST(ModelFile, LayoutConversionOfEveryElementSize) {
  // [K=2, kh=3, kw=1, C=4] of random bytes: the OIHW tensor holds element (k, i, j, c) at
  // [k][c][i][j], and OHWI -> OIHW -> OHWI is the identity; non-4-D tensors pass through.
  std::mt19937 rng(11);
  for (DType d : {DType::u8, DType::bf16, DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(d));
    Tensor t = Tensor::empty({2, 3, 1, 4}, {.dtype = d});
    auto* bytes = static_cast<unsigned char*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
    Tensor bias = full({2}, 1.0);
    auto oihw = train::to_file_layout({{"w", t}, {"b", bias}});
    ASSERT_EQ(oihw[0].second.shape(), (Shape{2, 4, 3, 1}));
    EXPECT_TRUE(oihw[1].second.same(bias));
    const size_t es = dtype_size(d);
    const auto* out = static_cast<const unsigned char*>(oihw[0].second.data_ptr());
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 3; ++i)
        for (int c = 0; c < 4; ++c) {
          EXPECT_EQ(
              std::memcmp(out + ((k * 4 + c) * 3 + i) * es, bytes + ((k * 3 + i) * 4 + c) * es, es),
              0)
              << "k=" << k << " i=" << i << " c=" << c;
        }
    auto back = train::from_file_layout(oihw);
    EXPECT_EQ(back[0].second.shape(), t.shape());
    EXPECT_EQ(test::tensor_bytes(back[0].second), test::tensor_bytes(t));
  }
}

TEST(ModelFile, SequentialRoundTripBitExact) {
  auto a = small_model(1), b = small_model(2);
  ASSERT_NE(test::snapshot(state_of(*a)), test::snapshot(state_of(*b)));
  ScratchFile f("seq");
  train::save_model(f.path(), *a, {{"arch", "small"}});

  auto [tensors, md] = train::load_safetensors(f.path());
  EXPECT_EQ(md.at("arch"), "small");
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  EXPECT_EQ(by_name.size(), 9u);
  EXPECT_EQ(by_name.at("0.weight").shape(), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(by_name.at("2.weight").shape(), (Shape{2, 5}));
  EXPECT_EQ(by_name.at("1.num_batches_tracked").shape(), Shape{});
  EXPECT_EQ(by_name.at("1.num_batches_tracked").dtype(), DType::i64);
  EXPECT_EQ(by_name.at("1.num_batches_tracked").item(), 13);

  train::load_model(f.path(), *b);
  EXPECT_EQ(test::snapshot(state_of(*b)), test::snapshot(state_of(*a)));
}

TEST(ModelFile, LoadedBatchNormCountsOnFromTheLoadedValue) {
  Generator gen(3);
  Tensor x = randn({2, 3, 3, 4}, gen);  // [N, H, W, C]
  nn::BatchNorm2d bn(4);
  bn.forward(x);
  ASSERT_EQ(bn.num_batches_tracked.item(), 1);
  nn::BatchNorm2d saved(4);
  fill_(saved.num_batches_tracked, 7);
  ScratchFile f("bn");
  train::save_model(f.path(), saved);
  train::load_model(f.path(), bn);
  EXPECT_EQ(bn.num_batches_tracked.item(), 7);
  bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.item(), 8);  // 2 if a count kept aside were used
}

// torchvision's older weight files have no num_batches_tracked (BatchNorm's counter came later);
// PyTorch's BatchNorm starts a missing one at 0, and so does load_model. Any other missing
// tensor is still refused.
TEST(ModelFile, AMissingBatchNormCounterLoadsAsZero) {
  auto a = small_model(1), b = small_model(2);
  nn::NamedTensors legacy;
  for (auto& [name, t] : train::to_file_layout(state_of(*a))) {
    if (name != "1.num_batches_tracked") legacy.emplace_back(name, t);
  }
  ScratchFile f("legacy");
  train::save_safetensors(f.path(), legacy, {});
  train::load_model(f.path(), *b);
  nn::NamedTensors want = state_of(*a), got = state_of(*b);
  for (auto& [name, t] : want) {
    if (name == "1.num_batches_tracked") t = zeros({}, {.dtype = DType::i64});
  }
  EXPECT_EQ(test::snapshot(got), test::snapshot(want));
}

// Each mismatch is written late in the file's list, so a loader that copied as it went would
// already have changed the earlier tensors.
TEST(ModelFile, MismatchesRejectedWithTheModelUnchanged) {
  auto a = small_model(1);
  nn::NamedTensors good = train::to_file_layout(state_of(*a));
  auto with = [&](const std::function<void(nn::NamedTensors&)>& edit) {
    nn::NamedTensors t = good;
    edit(t);
    return t;
  };
  auto replace = [](nn::NamedTensors& t, const std::string& name, Tensor v) {
    for (auto& [n, x] : t)
      if (n == name) x = v;
  };
  struct Case {
    const char* what;
    nn::NamedTensors tensors;
    std::vector<std::string> mentions;
  };
  std::vector<Case> cases = {
      {"missing",
       with([](auto& t) {
         std::erase_if(t, [](const auto& e) { return e.first == "1.running_var"; });
       }),
       {"missing tensor '1.running_var'", "expected [4] F32"}},
      {"extra",
       with([](auto& t) { t.emplace_back("3.weight", full({2}, 1.0)); }),
       {"unexpected tensor '3.weight'", "[2] F32"}},
      {"linear shape",
       with([&](auto& t) {
         replace(t, "2.weight", full({2, 6}, 1.0));
       }),
       {"'2.weight' has shape [2, 6]", "expected [2, 5]"}},
      {"conv shape",
       with([&](auto& t) {
         replace(t, "0.weight", full({4, 3, 5, 5}, 1.0));
       }),
       {"'0.weight' has shape [4, 5, 5, 3]", "[4, 3, 5, 5] OIHW in the file",
        "expected [4, 3, 3, 3]"}},
      {"dtype",
       with([&](auto& t) { replace(t, "2.bias", full({2}, 1.0, {.dtype = DType::f16})); }),
       {"'2.bias' has dtype F16", "expected F32"}},
      {"count dtype",
       with([&](auto& t) { replace(t, "1.num_batches_tracked", full({}, 3.0)); }),
       {"'1.num_batches_tracked' has dtype F32", "expected I64"}},
      // A weight a model cannot use: loaded, it would turn every later step into NaN.
      {"nan weight",
       with([&](auto& t) {
         Tensor w = full({2, 5}, 1.0);
         static_cast<float*>(w.data_ptr())[7] = std::numeric_limits<float>::quiet_NaN();
         replace(t, "2.weight", w);
       }),
       {"tensor '2.weight' holds nan at element 7 of 10"}},
      {"inf running variance",
       with([&](auto& t) { replace(t, "1.running_var", full({4}, INFINITY)); }),
       {"tensor '1.running_var' holds inf at element 0 of 4"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    ScratchFile f("case");
    train::save_safetensors(f.path(), c.tensors);
    auto b = small_model(2);
    auto before = test::snapshot(state_of(*b));
    std::string msg = error_of([&] { train::load_model(f.path(), *b); });
    expect_mentions(msg, {f.path(), "nothing was loaded"});
    expect_mentions(msg, c.mentions);
    EXPECT_EQ(test::snapshot(state_of(*b)), before);
  }
}

// Another model's file gives hundreds of problems: the first 20 are listed, then a count and the
// likely cause, where all of them (257 lines for another width of MobileNetV2) buried it.
TEST(ModelFile, ManyMismatchesListTheFirstTwentyAndCountTheRest) {
  nn::NamedTensors extra = train::to_file_layout(state_of(*small_model(1)));
  for (int i = 0; i < 30; ++i) extra.emplace_back("x" + std::to_string(i), full({2}, 1.0));
  ScratchFile f("many");
  train::save_safetensors(f.path(), extra);
  auto m = small_model(2);
  const std::string msg = error_of([&] { train::load_model(f.path(), *m); });
  expect_mentions(msg, {"... and 10 more (30 problems in all: is it another model's"});
  EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 21) << msg;
}
