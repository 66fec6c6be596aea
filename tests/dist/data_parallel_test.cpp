#include "dist/data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"
#include "dist/buckets.h"
#include "dist/meta_group.h"
#include "dist/rank_threads.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "train/memory_estimate.h"
#include "train/trainer.h"

namespace frugal {
namespace {

using test::no_errors;
using test::run_ranks;

// conv -> relu -> pool -> linear, no BatchNorm: a shard's mean-loss gradients average to the
// whole batch's exactly (up to rounding).
std::shared_ptr<nn::Module> small_net(uint64_t seed, bool batch_norm = false) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(3, 6, 3));
  if (batch_norm) net->push_back(std::make_shared<nn::BatchNorm2d>(6));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(6, 4));
  return net;
}

struct Batch {
  Tensor images, labels;
};
Batch batch_of(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> l;
  for (int64_t i = 0; i < n; ++i) l.push_back(static_cast<double>((i * 7 + 3) % 4));
  return {randn({n, 6, 6, 3}, gen), from_vector(l, {n}, {.dtype = DType::i64})};
}

std::vector<std::vector<double>> grads_of(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.grad().to_vector());
  return out;
}
std::vector<std::vector<double>> values_of(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector());
  return out;
}

void expect_close(const std::vector<std::vector<double>>& a,
                  const std::vector<std::vector<double>>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    for (size_t j = 0; j < a[i].size(); ++j) {
      ASSERT_NEAR(a[i][j], b[i][j], tol) << what << ": parameter " << i << " element " << j;
    }
  }
}

TEST(GradientBuckets, ReverseOrderFirstBucketSmallOneDtypeEach) {
  // Four f32 parameters of 100, 300, 50, 200 elements; caps 1,000 bytes, first 400.
  std::vector<dist::BucketParam> p{
      {100, DType::f32}, {300, DType::f32}, {50, DType::f32}, {200, DType::f32}};
  auto b = dist::plan_buckets(p, 1000, 400);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{3}));  // 800 B: alone over the first cap
  EXPECT_EQ(b[1].params, (std::vector<size_t>{2}));  // 200 B, and 300 more elements would not fit
  EXPECT_EQ(b[2].params, (std::vector<size_t>{1}));
  EXPECT_EQ(b[3].params, (std::vector<size_t>{0}));
  auto big = dist::plan_buckets(p, 1 << 20, 1 << 20);
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].params, (std::vector<size_t>{3, 2, 1, 0}));
  EXPECT_EQ(big[0].numel, 650u);
  auto mixed = dist::plan_buckets({{10, DType::f32}, {10, DType::bf16}}, 1 << 20, 1 << 20);
  EXPECT_EQ(mixed.size(), 2u);
  EXPECT_EQ(mixed[0].dtype, DType::bf16);
}

TEST(DataParallel, TwoRanksOnHalfBatchesStepLikeOneProcessOnTheWholeBatch) {
  constexpr int kRanks = 2, kSteps = 3;
  constexpr int64_t kBatch = 8;
  // One process on whole batches.
  auto reference = small_net(7);
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<Batch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(batch_of(kBatch, 100 + s));
  std::vector<std::vector<std::vector<double>>> ref_grads;
  for (const Batch& b : batches) {
    ref_opt.zero_grad();
    nn::functional::cross_entropy((*reference)(b.images), b.labels).backward();
    ref_grads.push_back(grads_of(*reference));
    ref_opt.step();
  }
  // Two ranks, each built from another seed (the broadcast makes them rank 0's), each on its half.
  std::vector<std::shared_ptr<nn::Module>> nets{small_net(7), small_net(99)};
  std::vector<std::vector<std::vector<double>>> rank_grads(kRanks);
  std::vector<dist::DataParallel::Overlap> overlap(kRanks);
  bool agree[kRanks] = {false, false}, drifted[kRanks] = {true, true};
  std::vector<std::vector<std::vector<double>>> trained(kRanks);
  auto errors = run_ranks(kRanks, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    auto group = std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
    // Small buckets: the first goes out while backward still runs.
    dist::DataParallel model(nets[r], group,
                             {.bucket_cap_bytes = 256, .first_bucket_cap_bytes = 64});
    optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < kSteps; ++s) {
      const Batch& b = batches[static_cast<size_t>(s)];
      const int64_t half = kBatch / kRanks;
      opt.zero_grad();
      Tensor logits = model(slice_rows(b.images, g.rank() * half, half));
      nn::functional::cross_entropy(logits, slice_rows(b.labels, g.rank() * half, half)).backward();
      if (s == 0) rank_grads[r] = grads_of(model);
      opt.step();
    }
    overlap[r] = model.last_overlap();
    agree[r] = model.replicas_agree();
    trained[r] = values_of(model);
    if (r == 1) {  // rank 1 drifts
      autograd::NoGradGuard no_grad;
      fill_(model.module().parameters()[2], 0.5);
    }
    drifted[r] = model.replicas_agree();
  });
  ASSERT_TRUE(no_errors(errors));
  EXPECT_TRUE(agree[0] && agree[1]);
  EXPECT_FALSE(drifted[0] || drifted[1]) << "every rank must see that rank 1 drifted";
  expect_close(rank_grads[0], ref_grads[0], 1e-6, "first step's gradients");
  EXPECT_EQ(rank_grads[0], rank_grads[1]) << "ranks must end backward with identical gradients";
  EXPECT_EQ(trained[0], trained[1]) << "replicas must stay bit-identical";
  expect_close(trained[0], values_of(*reference), 1e-5, "weights after 3 steps");
  EXPECT_GE(overlap[0].during_backward, 1) << "no bucket went out before backward ended";
  // Reversed: the last bias (16 B) fills the 64-byte first bucket; the last weight and the conv's
  // bias share the next (120 of 256 B); the conv weight (648 B) is a bucket alone.
  EXPECT_EQ(overlap[0].during_backward + overlap[0].at_end, 3);
}

// Two ranks with local BatchNorm, each on its half of every batch in `rank_micro` micro-batches,
// against one process on the whole batch in 2 * rank_micro: the same slices, each normalised
// alone. Returns the buckets each rank all-reduced over the steps (and how many it has).
struct MicroBatchRun {
  int64_t reduced = 0, buckets = 0;
};
MicroBatchRun expect_ranks_equal_micro_batches(int steps, int64_t rank_micro, uint64_t seed) {
  constexpr int64_t kBatch = 8;
  auto reference = small_net(seed, /*batch_norm=*/true);
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<Batch> batches;
  for (int s = 0; s < steps; ++s) batches.push_back(batch_of(kBatch, seed * 100 + s));
  for (const Batch& b : batches) {
    train::train_step(*reference, ref_opt, b.images, b.labels, DType::f32, nullptr, 0.0,
                      2 * rank_micro);
  }
  std::vector<std::shared_ptr<nn::Module>> nets{small_net(seed, true), small_net(seed, true)};
  MicroBatchRun run;
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    dist::DataParallel model(nets[r], std::shared_ptr<dist::ProcessGroup>(&g, [](auto*) {}));
    optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
    for (const Batch& b : batches) {
      const int64_t half = kBatch / 2;
      train::train_step(model, opt, slice_rows(b.images, g.rank() * half, half),
                        slice_rows(b.labels, g.rank() * half, half), DType::f32, nullptr, 0.0,
                        rank_micro);
    }
    if (r == 0) run = {model.buckets_reduced(), static_cast<int64_t>(model.buckets().size())};
  });
  EXPECT_TRUE(no_errors(errors));
  expect_close(values_of(*nets[0]), values_of(*reference), 2e-5, "rank 0");
  EXPECT_EQ(values_of(*nets[0]), values_of(*nets[1])) << "replicas must stay bit-identical";
  return run;
}

// With BatchNorm local to each rank, two ranks on halves are one process accumulating two
// micro-batches of those halves (each normalised alone), step after step.
TEST(DataParallel, LocalBatchNormRanksEqualOneProcessWithMicroBatches) {
  const MicroBatchRun run = expect_ranks_equal_micro_batches(4, 1, 12);
  EXPECT_EQ(run.reduced, 4 * run.buckets);
}

// Micro-batches on each rank: the ones before the last run under no_sync, so a step all-reduces
// once, and the result is still one process's accumulation over all the slices.
TEST(DataParallel, MicroBatchesReduceOnceAStep) {
  const MicroBatchRun run = expect_ranks_equal_micro_batches(3, 2, 13);
  EXPECT_EQ(run.reduced, 3 * run.buckets) << "more than one all-reduce a step";
}

TEST(DataParallel, AParameterOnlyOneRankUsedGetsTheAverageEverywhere) {
  std::vector<std::shared_ptr<nn::Module>> nets{small_net(1), small_net(1)};
  std::vector<std::vector<double>> bias_grad(2);
  std::vector<dist::DataParallel::Overlap> overlap(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    auto group = std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
    dist::DataParallel model(nets[r], group);
    Batch b = batch_of(4, 5);
    Tensor logits = model(b.images);
    // Rank 1's loss reaches the conv's weight alone: the other parameters get no gradient there.
    Tensor loss = g.rank() == 0 ? sum(logits) : sum(mul(model.module().parameters()[0], 1.0));
    loss.backward();
    bias_grad[r] = model.module().parameters().back().grad().to_vector();
    overlap[r] = model.last_overlap();
  });
  ASSERT_TRUE(no_errors(errors));
  // Rank 0: d sum(logits) / d bias = 4 per class; rank 1: none. Average: 2.
  EXPECT_EQ(bias_grad[0], (std::vector<double>{2, 2, 2, 2}));
  EXPECT_EQ(bias_grad[1], bias_grad[0]);
  EXPECT_EQ(overlap[1].at_end, 1);  // rank 1's one bucket waited for gradients that never came
}

// Note [Globally unused parameters]: the linear layer no rank's loss reaches keeps no gradient on
// either rank, so SGD with weight decay and momentum leaves it as it was, as one process would.
// It used to get zeros, and weight decay shrank it. The conv layer one rank used gets the average.
TEST(DataParallel, AParameterNoRankUsedKeepsNoGradientAndTheOptimizerSkipsIt) {
  std::vector<std::shared_ptr<nn::Module>> nets{small_net(4), small_net(4)};
  std::vector<std::vector<double>> head_before(2), head_after(2), conv_grad(2);
  std::vector<bool> head_has_grad(2, true);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    auto group = std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
    dist::DataParallel model(nets[r], group);
    const std::vector<Tensor> p = model.module().parameters();  // conv w, b, linear w, b
    optim::SGD opt(p, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5});
    head_before[r] = p[2].to_vector();
    Tensor loss = r == 0 ? sum(mul(p[0], 2.0)) : sum(mul(p[1], 4.0));
    loss.backward();
    head_has_grad[r] = p[2].grad().defined() || p[3].grad().defined();
    conv_grad[r] = p[0].grad().to_vector();
    opt.step();
    head_after[r] = p[2].to_vector();
  });
  ASSERT_TRUE(no_errors(errors));
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_FALSE(head_has_grad[r]) << "rank " << r;
    EXPECT_EQ(head_after[r], head_before[r]) << "rank " << r << ": weight decay moved it";
    EXPECT_EQ(conv_grad[r], std::vector<double>(conv_grad[r].size(), 1.0)) << "rank " << r;
  }
}

// Buckets start in index order on every rank (PyTorch's Reducer): with one parameter a bucket,
// rank 0 completing bucket 1 first and rank 1 bucket 0 used to pair rank 0's bucket 1 with rank
// 1's bucket 0 in the first all-reduce, mixing the two parameters' gradients without an error.
TEST(DataParallel, BucketsStartInOrderWhenRanksCompleteThemInAnother) {
  std::vector<std::shared_ptr<nn::Module>> nets(2);
  for (auto& net : nets) {
    auto seq = std::make_shared<nn::Sequential>();
    seq->push_back(std::make_shared<nn::Linear>(2, 2, false));
    seq->push_back(std::make_shared<nn::Linear>(2, 2, false));
    net = seq;
  }
  std::vector<std::vector<std::vector<double>>> grads(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    auto group = std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
    dist::DataParallel model(nets[r], group, {.bucket_cap_bytes = 1, .first_bucket_cap_bytes = 1});
    ASSERT_EQ(model.buckets().size(), 2u);
    const std::vector<Tensor> p = model.module().parameters();
    Tensor loss = r == 0 ? sum(p[0]) : sum(mul(p[1], 3.0));  // each rank one parameter
    loss.backward();
    grads[r] = grads_of(model.module());
  });
  ASSERT_TRUE(no_errors(errors));
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(grads[r][0], std::vector<double>(4, 0.5)) << "rank " << r;
    EXPECT_EQ(grads[r][1], std::vector<double>(4, 1.5)) << "rank " << r;
  }
}

TEST(DataParallel, Bf16ReductionRoundsOnceAndStaysIdenticalAcrossRanks) {
  std::vector<std::shared_ptr<nn::Module>> nets{small_net(3), small_net(3)};
  std::vector<std::vector<std::vector<double>>> grads(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    auto group = std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
    dist::DataParallel model(nets[r], group, {.reduce_dtype = DType::bf16});
    Batch b = batch_of(4, 11 + r);
    nn::functional::cross_entropy(model(b.images), b.labels).backward();
    grads[r] = grads_of(model);
  });
  ASSERT_TRUE(no_errors(errors));
  EXPECT_EQ(grads[0], grads[1]);
  for (const auto& p : grads[0]) {
    for (double v : p) {  // every value a bf16: the low 16 bits of its f32 are zero
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      ASSERT_EQ(bits & 0xffffu, 0u) << v;
    }
  }
}

TEST(DataParallel, BuffersFollowRankZeroEveryTrainingForward) {
  std::vector<std::shared_ptr<nn::Module>> nets{small_net(4, true), small_net(4, true)};
  std::vector<std::vector<double>> means(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    auto group = std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
    dist::DataParallel model(nets[r], group);
    Batch b = batch_of(4, 21);  // the same batch on both ranks
    if (r == 1) {  // rank 1's statistics drift (as a rank's own batches would make them)
      for (auto& [name, t] : model.named_buffers()) {
        if (name.find("running_mean") != std::string::npos) fill_(t, 5.0);
      }
    }
    (void)model(b.images);
    for (auto& [name, t] : model.named_buffers()) {
      if (name.find("running_mean") != std::string::npos) means[r] = t.to_vector();
    }
  });
  ASSERT_TRUE(no_errors(errors));
  EXPECT_EQ(means[0], means[1]);
  EXPECT_LT(std::abs(means[0][0]), 1.0);  // rank 0's (zero) start, not rank 1's 5
}

TEST(DataParallel, OneRanksOverflowSkipsTheStepOnEveryRank) {
  std::vector<std::shared_ptr<nn::Module>> nets{small_net(5), small_net(5)};
  std::vector<std::vector<std::vector<double>>> before(2), after(2);
  std::vector<double> scales(2);
  auto errors = run_ranks(2, [&](dist::SocketGroup& g) {
    const size_t r = static_cast<size_t>(g.rank());
    auto group = std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
    nn::Module& model = *nets[r];  // no DataParallel: the gradients stay each rank's own
    optim::SGD opt(model.parameters(), {.lr = 0.1});
    optim::GradScaler scaler({.init_scale = 1024});
    dist::agree_on_overflow(scaler, group);
    Batch b = batch_of(4, 2);
    scaler.scale(nn::functional::cross_entropy(model(b.images), b.labels)).backward();
    if (r == 1) fill_(model.parameters()[0].grad(), std::numeric_limits<double>::infinity());
    before[r] = values_of(model);
    scaler.step(opt);
    scaler.update();
    after[r] = values_of(model);
    scales[r] = scaler.get_scale();
  });
  ASSERT_TRUE(no_errors(errors));
  EXPECT_EQ(after[0], before[0]) << "rank 0 stepped although rank 1 overflowed";
  EXPECT_EQ(after[1], before[1]);
  EXPECT_EQ(scales[0], 512.0);
  EXPECT_EQ(scales[1], 512.0);
}

// The planner's dry run (Note [Planned steps]) of a data-parallel step, on meta over a group that
// moves nothing, asks for what DataParallel adds to the step (bucket buffers, averaged gradients)
// exactly as the real step does. (The CPU's convolutions ask for scratch memory the meta device
// leaves out; the plain steps' requests are compared as they are.)
TEST(DataParallel, AMetaDryRunAsksForWhatTheRealStepAdds) {
  const dist::DataParallelOptions options{.bucket_cap_bytes = 256, .first_bucket_cap_bytes = 64};
  auto bytes_of = [](const std::vector<memory::StepTrace>& traces) {
    std::vector<size_t> out;
    for (const auto& a : traces.back().allocations) out.push_back(a.bytes);
    return out;
  };
  auto trace = [&](nn::Module& m) {
    optim::SGD opt(m.parameters(), {.lr = 0.1, .momentum = 0.9});
    return bytes_of(train::trace_steps(m, opt, {4, 6, 6, 3}, 4, DType::f32, 3, 1, false));
  };
  std::vector<size_t> cpu_plain, cpu_wrapped;
  auto errors = run_ranks(1, [&](dist::SocketGroup& g) {
    cpu_plain = trace(*small_net(2, true));
    dist::DataParallel model(small_net(2, true),
                             std::shared_ptr<dist::ProcessGroup>(&g, [](auto*) {}), options);
    cpu_wrapped = trace(model);
  });
  ASSERT_TRUE(no_errors(errors));
  auto meta_net = small_net(2, true);
  meta_net->to(Device::meta());
  const std::vector<size_t> meta_plain = trace(*meta_net);
  dist::DataParallel meta_model(meta_net, std::make_shared<dist::MetaGroup>(2), options);
  const std::vector<size_t> meta_wrapped = trace(meta_model);

  // Each wrapped step is its plain step, then DataParallel's requests at backward's end.
  auto added = [](const std::vector<size_t>& plain, const std::vector<size_t>& wrapped) {
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), wrapped.begin()));
    return std::vector<size_t>(wrapped.begin() + static_cast<int64_t>(plain.size()), wrapped.end());
  };
  const std::vector<size_t> cpu_added = added(cpu_plain, cpu_wrapped);
  const std::vector<size_t> meta_added = added(meta_plain, meta_wrapped);
  EXPECT_EQ(meta_added, cpu_added);
  // Three buckets, each its used flags (Note [Globally unused parameters]) and then its
  // flattened gradients with the flags behind them; then a gradient per parameter read back out.
  size_t bucket_bytes = 0;
  for (const dist::Bucket& b : meta_model.buckets()) bucket_bytes += b.bytes();
  const size_t flag_bytes = meta_model.parameters().size() * sizeof(float);
  EXPECT_EQ(meta_model.buckets().size(), 3u);
  EXPECT_EQ(meta_added.size(), 2 * meta_model.buckets().size() + meta_model.parameters().size());
  size_t added_bytes = 0;
  for (size_t b : meta_added) added_bytes += b;
  EXPECT_EQ(added_bytes, 2 * bucket_bytes + 2 * flag_bytes);
}

TEST(DataParallel, TheModelMustBeOnTheGroupsDevice) {
  auto errors = run_ranks(1, [&](dist::SocketGroup& g) {
    auto group = std::shared_ptr<dist::ProcessGroup>(&g, [](dist::ProcessGroup*) {});
    auto net = small_net(1);
    net->to(Device::meta());
    dist::DataParallel model(net, group);
  });
  EXPECT_NE(errors[0].find("is on meta but the socket group works on cpu"), std::string::npos)
      << errors[0];
}

}  // namespace
}  // namespace frugal
