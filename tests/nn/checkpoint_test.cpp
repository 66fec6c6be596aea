// Activation checkpointing (Note [Checkpointing]): gradients equal to the plain step bit for bit
// on the CPU in f32, batch-norm statistics counted once, dropout masks reproduced, the autocast
// state replayed, and parameter names unchanged.
#include "nn/checkpoint.h"

#include <gtest/gtest.h>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "models/registry.h"
#include "nn/functional.h"
#include "nn/layers.h"

using namespace frugal;
namespace F = frugal::nn::functional;

namespace {

struct StepResult {
  std::vector<std::pair<std::string, std::vector<double>>> grads, buffers;
  double loss = 0;
  uint64_t generator_offset = 0;
};

// One forward/backward of a small model from a fixed seed; `dtype` autocasts when not f32.
StepResult run_step(const models::CheckpointPolicy& policy,
                    const std::string& name = "mobilenet_v2", DType dtype = DType::f32) {
  default_generator().manual_seed(42);
  auto model = models::create(
      name,
      {.num_classes = 5, .in_channels = 3, .width = 0.35, .dropout = 0.5, .checkpoint = policy});
  model->train();
  Generator gen(1);
  Tensor x = randn({4, 32, 32, 3}, gen);
  Tensor labels = from_vector({0, 1, 2, 4}, Shape{4}, {.dtype = DType::i64});
  Tensor loss;
  {
    AutocastGuard amp(Device::cpu(), DType::bf16, dtype != DType::f32);
    loss = F::cross_entropy(model->forward(x), labels);
  }
  loss.backward();
  StepResult r;
  r.loss = loss.item();
  for (auto& [n, p] : model->named_parameters()) {
    r.grads.emplace_back(n, p.grad().defined() ? p.grad().to_vector() : std::vector<double>{});
  }
  for (auto& [n, b] : model->named_buffers()) r.buffers.emplace_back(n, b.to_vector());
  r.generator_offset = default_generator().offset();
  return r;
}

void expect_same(const StepResult& a, const StepResult& b) {
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_EQ(a.grads[i].first, b.grads[i].first);
    EXPECT_FALSE(a.grads[i].second.empty()) << a.grads[i].first << " got no gradient";
    EXPECT_EQ(a.grads[i].second, b.grads[i].second) << a.grads[i].first;
  }
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    EXPECT_EQ(a.buffers[i].second, b.buffers[i].second) << a.buffers[i].first;
  }
  EXPECT_EQ(a.generator_offset, b.generator_offset);
}

}  // namespace

TEST(Checkpoint, BlocksGiveTheSameStepBitForBit) {
  // Buffers include running statistics and num_batches_tracked (1, not 2): counted once.
  const StepResult plain = run_step({});
  expect_same(plain, run_step(models::CheckpointPolicy::parse("blocks")));
  for (auto& [name, values] : plain.buffers) {
    if (name.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(values[0], 1.0) << name;
    }
  }
}

TEST(Checkpoint, TheFirstBlocksOnlyGiveTheSameStepBitForBit) {
  const auto policy = models::CheckpointPolicy::parse("first:4");
  expect_same(run_step({}), run_step(policy));
  // The stem and the first three inverted residuals are checkpointed, nothing after them.
  auto model = models::create("mobilenet_v2", {.num_classes = 5, .checkpoint = policy});
  int wrapped = 0;
  for (const auto& [name, m] : model->named_modules()) wrapped += m->type_name() == "Checkpoint";
  EXPECT_EQ(wrapped, 4);
}

TEST(Checkpoint, SegmentsGiveTheSameStepBitForBit) {
  expect_same(run_step({}), run_step(models::CheckpointPolicy::parse("3")));
}

TEST(Checkpoint, EveryZooModelCheckpointsItsBlocks) {
  for (const char* name : {"mobilenet_v1", "efficientnet_b0", "resnet18"}) {
    SCOPED_TRACE(name);
    // EfficientNet's stochastic depth draws from the default generator inside the blocks: the
    // replay must draw the same rows.
    expect_same(run_step({}, name), run_step(models::CheckpointPolicy::parse("blocks"), name));
  }
}

TEST(Checkpoint, ReplaysTheAutocastState) {
  expect_same(run_step({}, "mobilenet_v2", DType::bf16),
              run_step(models::CheckpointPolicy::parse("blocks"), "mobilenet_v2", DType::bf16));
}

TEST(Checkpoint, DropoutMasksAreReproduced) {
  // A segment that draws from the default generator: the replay must use the same mask.
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(6, 6));
  seq->push_back(std::make_shared<nn::Dropout>(0.5));
  seq->push_back(std::make_shared<nn::ReLU>());
  Generator gen(2);
  Tensor x = randn({5, 6}, gen, {.requires_grad = true});
  auto grads = [&](bool checkpointed) {
    default_generator().manual_seed(9);
    seq->zero_grad();
    x.zero_grad();
    Tensor y = checkpointed ? nn::Checkpoint(seq).forward(x) : seq->forward(x);
    sum(mul(y, y)).backward();
    std::vector<double> g = x.grad().to_vector();
    for (const Tensor& p : seq->parameters()) {
      for (double v : p.grad().to_vector()) g.push_back(v);
    }
    g.push_back(static_cast<double>(default_generator().offset()));
    return g;
  };
  EXPECT_EQ(grads(false), grads(true));
}

// The graph keeps the wrapped module for its recomputation: backward runs after the Checkpoint
// is gone (ASan found the recomputation reading the destroyed wrapper), and the module goes with
// the graph.
TEST(Checkpoint, BackwardOutlivesTheWrapper) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(4, 3));
  std::weak_ptr<nn::Sequential> inner = seq;
  Tensor w = seq->parameters()[0];
  Generator gen(3);
  Tensor x = randn({2, 4}, gen, {.requires_grad = true});
  Tensor loss;
  {
    auto wrapper = std::make_shared<nn::Checkpoint>(std::move(seq));
    loss = sum(wrapper->forward(x));
  }
  EXPECT_FALSE(inner.expired()) << "the graph must keep the module it recomputes";
  loss.backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(x.grad().defined());
  loss = Tensor();
  EXPECT_TRUE(inner.expired()) << "the graph kept the module after it was dropped";
}

TEST(Checkpoint, WrapperKeepsParameterNames) {
  auto plain = models::create("mobilenet_v2", {.num_classes = 5, .width = 0.35});
  auto wrapped = models::create(
      "mobilenet_v2",
      {.num_classes = 5, .width = 0.35, .checkpoint = models::CheckpointPolicy::parse("blocks")});
  auto a = plain->named_parameters(), b = wrapped->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].first, b[i].first);
  auto ba = plain->named_buffers(), bb = wrapped->named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_EQ(ba[i].first, bb[i].first);
}

TEST(Checkpoint, SegmentKeepsOnlyItsInput) {
  // A checkpointed segment saves its input and nothing inside.
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Conv2d>(4, 16, 3, nn::Conv2dOptions{.padding = 1}));
  seq->push_back(std::make_shared<nn::BatchNorm2d>(16));
  seq->push_back(std::make_shared<nn::ReLU>());
  seq->push_back(std::make_shared<nn::Conv2d>(16, 4, 1));
  Generator gen(4);
  Tensor x = randn({2, 8, 8, 4}, gen, {.requires_grad = true});
  Tensor y = nn::Checkpoint(seq).forward(x);
  EXPECT_EQ(autograd::saved_bytes({y}), x.nbytes());
  EXPECT_GT(autograd::saved_bytes({seq->forward(x)}), 4 * x.nbytes());
}

TEST(Checkpoint, BadPolicyIsRejected) {
  EXPECT_THROW(models::CheckpointPolicy::parse("0"), Error);
  EXPECT_THROW(models::CheckpointPolicy::parse("some"), Error);
  EXPECT_THROW(models::CheckpointPolicy::parse("2x"), Error);
  EXPECT_THROW(models::CheckpointPolicy::parse("first:0"), Error);
  EXPECT_THROW(models::CheckpointPolicy::parse("first:"), Error);
  EXPECT_EQ(models::CheckpointPolicy::parse("first:3").first, 3);
  EXPECT_EQ(models::CheckpointPolicy::parse("first:3").str(), "first:3");
  EXPECT_EQ(models::CheckpointPolicy::parse("4").segments, 4);
  EXPECT_EQ(models::CheckpointPolicy::parse("blocks").str(), "blocks");
}

// Backward inside the autocast region (`with torch.autocast(): loss.backward()` in PyTorch): the
// replay may reuse parameter copies the region cached before it, which lead to leaves alone, and
// the gradients stay those of the plain steps, two steps in one region.
TEST(Checkpoint, BackwardInsideTheAutocastRegionTrainsAsThePlainStep) {
  auto grads_of = [](const models::CheckpointPolicy& policy) {
    default_generator().manual_seed(42);
    auto model = models::create(
        "mobilenet_v2", {.num_classes = 5, .in_channels = 3, .width = 0.35, .checkpoint = policy});
    model->train();
    Generator gen(1);
    Tensor labels = from_vector({0, 1, 2, 4}, Shape{4}, {.dtype = DType::i64});
    std::vector<std::vector<double>> out;
    AutocastGuard amp(Device::cpu(), DType::bf16);
    for (int step = 0; step < 2; ++step) {
      Tensor x = randn({4, 32, 32, 3}, gen);
      model->zero_grad();
      F::cross_entropy(model->forward(x), labels).backward();
      for (const Tensor& p : model->parameters()) out.push_back(p.grad().to_vector());
    }
    return out;
  };
  EXPECT_EQ(grads_of({}), grads_of(models::CheckpointPolicy::parse("blocks")));
}

// A segment that reads a tensor with history other than its input (here one it captured) cannot
// hand that tensor's gradient back: its replay's backward would run on into the outer graph with
// a share of the gradient and free it. It is refused when backward replays the segment, naming
// the op that made the tensor, before the replay accumulates anything. A parameter with history
// is refused when the segment runs.
TEST(Checkpoint, ATensorWithHistoryThatIsNotTheInputIsRefused) {
  Tensor w = full({3}, 1.5, {.requires_grad = true});
  Tensor h = mul(w, 2.0);
  Tensor x = full({3}, 2.0, {.requires_grad = true});
  Tensor y = nn::checkpoint([&](const Tensor& in) { return mul(in, h); }, x, {});
  const std::string msg = [&] {
    try {
      sum(y).backward();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(msg.find("checkpoint: the segment reads a tensor made by '" + h.grad_fn()->name()),
            std::string::npos)
      << msg;
  EXPECT_FALSE(w.grad().defined()) << "the replay ran on into the outer graph";

  Tensor v = full({3}, 2.0, {.requires_grad = true});
  EXPECT_THROW(nn::checkpoint([&](const Tensor& in) { return mul(in, h); }, v, {h}), Error);
}

// A replay's casts are not cached: with backward inside one autocast region over several steps,
// the replay's input (an f32 leaf that requires grad, as a parameter is) and its parameter copies
// used to stay cached, and alive, until the region ended, one more input each step.
TEST(Checkpoint, AReplayInsideTheAutocastRegionCachesNothing) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(16, 16));
  Generator gen(3);
  AutocastGuard amp(Device::cpu(), DType::bf16);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({8, 16}, gen, {.requires_grad = true});
    seq->zero_grad();
    sum(nn::Checkpoint(seq).forward(x)).backward();
    EXPECT_EQ(autocast::cache_size(), 0u) << "step " << step;
    EXPECT_TRUE(x.grad().defined());
    EXPECT_TRUE(seq->parameters()[0].grad().defined());
  }
}
