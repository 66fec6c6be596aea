// The memory tools on a real CPU training step (issue 13): allocation tags name the op and the
// module, the allocation trace of a step is valid trace-event JSON whose slices and counters
// agree with the allocator, and LeakCheck catches losses kept with their graphs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/factory.h"
#include "core/ops.h"
#include "memory/allocation_trace.h"
#include "memory/leak_check.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "train/trainer.h"

using namespace frugal;
using json = nlohmann::json;

namespace {

struct Recorder : memory::AllocationObserver {
  std::vector<memory::AllocationEvent> events;
  Recorder() { memory::add_allocation_observer(this); }
  ~Recorder() override { memory::remove_allocation_observer(this); }
  void on_event(const memory::AllocationEvent& e) override {
    if (e.device == Device::cpu()) events.push_back(e);
  }
  bool has(const std::string& tag_name) const {
    for (const auto& e : events) {
      if (e.is_alloc() && memory::tag_name(e) == tag_name) return true;
    }
    return false;
  }
};

// A small CNN whose convolutions sit in a child Sequential named "features".
std::shared_ptr<nn::Sequential> small_cnn() {
  manual_seed(3);
  auto features = std::make_shared<nn::Sequential>();
  features->push_back(
      std::make_shared<nn::Conv2d>(1, 8, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  features->push_back(std::make_shared<nn::BatchNorm2d>(8));
  features->push_back(std::make_shared<nn::ReLU6>());
  features->push_back(std::make_shared<nn::Conv2d>(8, 16, 3, nn::Conv2dOptions{.stride = 2}));
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(features);
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(16, 4));
  return net;
}

struct Batch {
  Tensor x, y;
};
Batch batch() {
  Generator gen(5);
  std::vector<double> lab;
  for (int i = 0; i < 8; ++i) lab.push_back(i % 4);
  return {randn({8, 8, 8, 1}, gen), from_vector(lab, Shape{8}, {.dtype = DType::i64})};
}

}  // namespace

TEST(MemoryTools, AConvForwardIsTaggedWithItsOpAndModule) {
  auto net = small_cnn();
  Batch b = batch();
  Recorder rec;
  Tensor out = (*net)(b.x);
  EXPECT_TRUE(rec.has("0.0/conv2d"));  // the first conv of features (child "0" of the root)
  EXPECT_TRUE(rec.has("0.3/conv2d"));
  EXPECT_TRUE(rec.has("3/linear"));
  // Backward runs each node under the module its forward was recorded in.
  nn::functional::cross_entropy(out, b.y).backward();
  EXPECT_TRUE(rec.has("0.0/conv2d backward"));
  // The optimizer's state, made in its first step, is tagged "<optimizer> step".
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  opt.step();
  EXPECT_TRUE(rec.has("sgd step"));
}

TEST(MemoryTools, TheTraceOfATrainingStepAgreesWithTheAllocator) {
  auto net = small_cnn();
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  Batch b = batch();
  train::train_step(*net, opt, b.x, b.y);  // momentum buffers exist before the trace
  Recorder rec;
  memory::AllocationTrace trace(Device::cpu());
  train::train_step(*net, opt, b.x, b.y);
  trace.stop();
  std::ostringstream os;
  trace.write_json(os);
  const json t = json::parse(os.str());  // strict: throws on anything that is not JSON

  size_t allocs = 0, paired_frees = 0;
  std::set<uint64_t> ids;
  for (const auto& e : rec.events) {
    if (e.is_alloc()) {
      allocs++;
      ids.insert(e.id);
    } else if (e.is_free() && ids.count(e.id) > 0) {
      paired_frees++;
    }
  }
  size_t begins = 0, ends = 0, live_at_end = 0;
  bool conv_backward = false;
  json last_allocated;
  for (const json& e : t.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "b") {
      begins++;
      EXPECT_GT(e.at("args").at("bytes").get<int64_t>(), 0);
      conv_backward = conv_backward || e.at("name") == "0.3/conv2d backward";
    } else if (ph == "e") {
      ends++;
      if (e.contains("args") && e.at("args").contains("live_at_end")) live_at_end++;
    } else if (ph == "C" && e.at("name") == "allocated") {
      last_allocated = e.at("args").at("bytes");
    }
  }
  EXPECT_GT(allocs, 20u);
  EXPECT_EQ(begins, allocs);
  EXPECT_EQ(ends - live_at_end, paired_frees);
  EXPECT_EQ(ends, begins);  // every slice ends, the survivors (the new gradients) at the end
  EXPECT_EQ(live_at_end, allocs - paired_frees);
  EXPECT_TRUE(conv_backward);
  EXPECT_EQ(last_allocated.get<int64_t>(), memory::cpu_allocator().stats().allocated_bytes.current);
  EXPECT_EQ(t.at("otherData").at("dropped_events"), 0);
}

// A loop that keeps every loss with its graph: the losses leak (backward already freed what the
// nodes saved, Note [Eager freeing]); a loop that keeps loss.item() leaks nothing.
TEST(MemoryTools, LeakCheckCatchesLossesKeptWithTheirGraphs) {
  auto net = small_cnn();
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  Batch b = batch();
  train::train_step(*net, opt, b.x, b.y);
  std::vector<Tensor> losses;
  {
    memory::LeakCheck check;
    for (int i = 0; i < 3; ++i) losses.push_back(train::train_step(*net, opt, b.x, b.y));
    opt.zero_grad();  // the last step's gradients are not a leak
    check.finish();
    const std::vector<memory::Leak> leaks = check.leaks();
    ASSERT_EQ(leaks.size(), 1u) << check.report();
    EXPECT_EQ(leaks[0].name, "cross_entropy");
    EXPECT_EQ(leaks[0].count, 3);
    EXPECT_EQ(leaks[0].tag->phase, memory::Phase::forward);
    EXPECT_NE(check.report().find("3 allocations"), std::string::npos) << check.report();
  }
  std::vector<double> values;
  memory::LeakCheck clean;
  for (int i = 0; i < 3; ++i) values.push_back(train::train_step(*net, opt, b.x, b.y).item());
  opt.zero_grad();
  clean.finish();
  EXPECT_TRUE(clean.leaks().empty()) << clean.report();
  EXPECT_EQ(clean.report(), "");
}

// An evaluation loop run with grad mode on, keeping its losses: each graph keeps what its nodes
// saved for a backward that never comes, and the check names the modules and ops that saved it.
TEST(MemoryTools, LeakCheckNamesTheActivationsAGraphKeeps) {
  auto net = small_cnn();
  Batch b = batch();
  std::vector<Tensor> kept;
  memory::LeakCheck check({.at_end = memory::LeakAction::throw_error});
  for (int i = 0; i < 2; ++i) kept.push_back(nn::functional::cross_entropy((*net)(b.x), b.y));
  EXPECT_THROW(check.finish(), Error);
  const std::vector<memory::Leak> leaks = check.leaks();
  ASSERT_GT(leaks.size(), 2u);
  bool conv = false;
  for (const memory::Leak& l : leaks) conv = conv || l.name == "0.0/conv2d";
  EXPECT_TRUE(conv) << check.report();
  for (size_t i = 1; i < leaks.size(); ++i) EXPECT_GE(leaks[i - 1].bytes, leaks[i].bytes);

  std::vector<double> values;
  memory::LeakCheck clean({.at_end = memory::LeakAction::throw_error});
  for (int i = 0; i < 2; ++i) {
    values.push_back(nn::functional::cross_entropy((*net)(b.x), b.y).item());
  }
  EXPECT_NO_THROW(clean.finish());
}
