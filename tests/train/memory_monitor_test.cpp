// The memory monitor on the CPU: samples at every point equal to the allocator's counters, CSV
// and JSON that read back, the step and run pictures, and the growth check: a loop that keeps
// every loss with its graph is flagged and the tags that grew are named; the same loop keeping
// plain numbers is not.
#include "train/memory_monitor.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/factory.h"
#include "memory/allocator.h"
#include "memory/fake_device_source.h"
#include "nn/functional.h"
#include "train/trainer.h"
#include "train_test_util.h"

using namespace frugal;

namespace {

struct MonitoredRun {
  std::unique_ptr<train::MemoryMonitor> monitor;
  std::vector<int64_t> allocated_seen;  // by a callback registered after the monitor's
  std::vector<std::string> warnings;
};

// Trains `epochs` epochs of 4 steps. With `leak`, a step_end callback computes a validation loss
// with gradients enabled and keeps it in a list: each kept loss holds its graph and the
// activations the graph saved, as `val_losses.append(loss)` outside no_grad does in PyTorch.
MonitoredRun train_monitored(int64_t epochs, bool leak) {
  manual_seed(5);
  auto net = train_test::tiny_cnn(16);
  auto loader = train_test::tiny_loader(64, 16);
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  MonitoredRun run;
  run.monitor = std::make_unique<train::MemoryMonitor>(
      Device::cpu(), train::MemoryMonitorOptions{
                         .tolerance_bytes = 1024,
                         .profile_step = 2,
                         .device_used = [] { return int64_t{123} << 20; },
                         .warn = [&](const std::string& w) { run.warnings.push_back(w); }});
  train::StepCallbacks cb;
  run.monitor->attach(cb);
  cb.add_all([&](const train::StepInfo&) {
    run.allocated_seen.push_back(memory::cpu_allocator().stats().allocated_bytes.current);
  });
  std::vector<Tensor> kept;
  Generator gen(9);
  Tensor val_x = randn({16, 8, 8, 1}, gen);
  Tensor val_y = zeros({16}, {.dtype = DType::i64});
  if (leak) {
    cb.add(train::StepPoint::step_end, [&](const train::StepInfo&) {
      kept.push_back(nn::functional::cross_entropy((*net)(val_x), val_y));
    });
  }
  for (int64_t e = 0; e < epochs; ++e) {
    train::train_epoch(*net, opt, nullptr, *loader, e,
                       {.progress = [](const train::Progress&) {}, .callbacks = &cb});
  }
  return run;
}

}  // namespace

TEST(MemoryMonitor, RecordsTheAllocatorsCountersAtEveryPoint) {
  MonitoredRun run = train_monitored(1, false);
  const auto& samples = run.monitor->samples();
  ASSERT_EQ(samples.size(), 4 * 5 + 1);  // five points a step, and the epoch's end
  ASSERT_EQ(run.allocated_seen.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(samples[i].allocated, run.allocated_seen[i]) << i;
    EXPECT_EQ(samples[i].device_used, int64_t{123} << 20);
  }
  // The step's own allocations: its activations are there after forward and gone at its end.
  EXPECT_GT(samples[1].allocated, samples[0].allocated);
  EXPECT_EQ(samples[1].point, train::StepPoint::after_forward);
  // Each step end knows the step's peak, at least as high as any point inside it, and the
  // process's resident host memory (read at step ends only).
  for (size_t i = 4; i < 20; i += 5) {
    ASSERT_EQ(samples[i].point, train::StepPoint::step_end);
    EXPECT_GT(samples[i].host_rss, 0);
    EXPECT_EQ(samples[i - 1].host_rss, -1);
    for (size_t j = i - 4; j <= i; ++j) EXPECT_GE(samples[i].step_peak, samples[j].allocated);
  }
  EXPECT_FALSE(run.monitor->growth().has_value());
  EXPECT_TRUE(run.warnings.empty());
}

// A caching allocator counts whole blocks: 17 MiB asked for holds an 18 MiB block whose 1 MiB
// tail is too small to split off. The step's peak is the allocator's allocated peak, in the
// same bytes as the samples' allocated, not the requests' sum on top of it.
TEST(MemoryMonitor, TheStepPeakCountsWhatTheAllocatorCounts) {
  const Device fake = Device::cuda(15);
  memory::CachingAllocator alloc(
      std::make_unique<memory::testing::FakeDeviceSource>(size_t{1} << 30), fake);
  memory::register_device_allocator(fake, &alloc);
  struct Unregister {
    Device d;
    ~Unregister() { memory::register_device_allocator(d, nullptr); }
  } unregister{fake};
  train::MemoryMonitor monitor(fake, {.warn = [](const std::string&) {}});
  memory::DataPtr kept = alloc.allocate(2 * memory::kMiB);
  monitor.record({.point = train::StepPoint::step_begin, .device = fake});
  alloc.reset_peak_stats();
  {
    memory::DataPtr a = alloc.allocate(17 * memory::kMiB);
    memory::DataPtr b = alloc.allocate(1);
    EXPECT_EQ(alloc.stats().allocated_bytes.current, static_cast<int64_t>(20 * memory::kMiB + 512));
  }
  monitor.record({.point = train::StepPoint::step_end, .device = fake});
  const train::MemorySample& end = monitor.samples().back();
  EXPECT_EQ(end.allocated, static_cast<int64_t>(2 * memory::kMiB));
  EXPECT_EQ(end.step_peak, alloc.stats().allocated_bytes.peak);
  EXPECT_EQ(end.step_peak, static_cast<int64_t>(20 * memory::kMiB + 512));
}

TEST(MemoryMonitor, CsvAndJsonHoldEverySample) {
  MonitoredRun run = train_monitored(1, false);
  const auto& samples = run.monitor->samples();
  std::istringstream csv(run.monitor->csv());
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line,
            "epoch,step,global_step,point,seconds,allocated_bytes,reserved_bytes,"
            "device_used_bytes,step_peak_bytes,host_rss_bytes");
  size_t rows = 0;
  while (std::getline(csv, line)) {
    const std::string alloc = std::to_string(samples[rows].allocated);
    EXPECT_NE(line.find("," + alloc + ","), std::string::npos) << line;
    ++rows;
  }
  EXPECT_EQ(rows, samples.size());

  nlohmann::json j = nlohmann::json::parse(run.monitor->json());
  EXPECT_EQ(j["device"], "cpu");
  ASSERT_EQ(j["samples"].size(), samples.size());
  EXPECT_EQ(j["samples"][4]["point"], "step_end");
  EXPECT_EQ(j["samples"][4]["allocated_bytes"].get<int64_t>(), samples[4].allocated);
  EXPECT_EQ(j["samples"][4]["step_peak_bytes"].get<int64_t>(), samples[4].step_peak);
  EXPECT_EQ(j["samples"][4]["host_rss_bytes"].get<int64_t>(), samples[4].host_rss);
  EXPECT_FALSE(j["samples"][0].contains("host_rss_bytes"));  // step_begin: not read
  EXPECT_TRUE(j["growth"].is_null());
}

TEST(MemoryMonitor, DrawsTheProfiledStepWithItsPhasesAndTheRun) {
  MonitoredRun run = train_monitored(1, false);
  const std::string step = run.monitor->step_svg();
  EXPECT_EQ(step.rfind("<svg", 0), 0u);
  EXPECT_NE(step.find(">forward</title>"), std::string::npos);
  EXPECT_NE(step.find(">backward</title>"), std::string::npos);
  EXPECT_NE(step.find(">optimizer step</title>"), std::string::npos);
  EXPECT_NE(step.find("<polyline"), std::string::npos);
  const std::string whole = run.monitor->run_svg();
  // One point per step end in the allocated line: four steps.
  const size_t at = whole.find("<title>allocated</title>");
  ASSERT_NE(at, std::string::npos);
  const size_t start = whole.rfind("points=\"", at);
  const std::string pts = whole.substr(start, at - start);
  EXPECT_EQ(std::count(pts.begin(), pts.end(), ','), 4);
}

TEST(MemoryMonitor, FlagsALossKeptWithItsGraphAndNamesWhatGrew) {
  MonitoredRun run =
      train_monitored(3, true);  // 12 steps: 2 warm-up, 3 history, growth after 3 more
  const auto& g = run.monitor->growth();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->at_step, 7);
  EXPECT_GT(g->allocated, g->baseline);
  ASSERT_FALSE(g->grown_tags.empty());
  // What the kept graphs hold: activations saved inside the modules, tagged with their paths
  // ("1 (resident)": the batch norm, child 1, outside a training step's phases).
  for (const auto& [tag, bytes] : g->grown_tags) EXPECT_GT(bytes, 0);
  const std::string& top = g->grown_tags.front().first;
  EXPECT_GT(top.find(" ("), 0u) << g->str();
  EXPECT_NE(top.find(" ("), std::string::npos) << g->str();
  ASSERT_EQ(run.warnings.size(), 1u);
  EXPECT_NE(run.warnings[0].find("keeps growing"), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(run.monitor->json());
  EXPECT_EQ(j["growth"]["at_step"], 7);
}

TEST(MemoryMonitor, AStableRunIsNotFlagged) {
  MonitoredRun run = train_monitored(3, false);
  EXPECT_FALSE(run.monitor->growth().has_value());
  EXPECT_TRUE(run.warnings.empty());
}

TEST(MemoryMonitor, WritingToAMissingFolderNamesThePath) {
  MonitoredRun run = train_monitored(1, false);
  try {
    run.monitor->write_csv("/nonexistent-folder/run.csv");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/run.csv"), std::string::npos);
  }
}

TEST(MemoryMonitor, AStepAboveTheBaselineButNotHigherStartsANewRun) {
  // Step ends driven by hand: baseline 100 (steps 2-4), then 110, 110, 120, 130: the run of
  // rising step ends starts again at the second 110 and flags at 130 (three in a row).
  train::MemoryMonitor monitor(Device::cpu(),
                               {.tolerance_bytes = 1, .warn = [](const std::string&) {}});
  train::StepCallbacks cb;
  monitor.attach(cb);
  std::vector<memory::DataPtr> held;
  int64_t held_bytes = 0;
  auto step_to = [&](int64_t extra) {
    if (extra > held_bytes) {
      held.push_back(memory::cpu_allocator().allocate(static_cast<size_t>(extra - held_bytes)));
      held_bytes = extra;
    }
    cb.fire(train::StepPoint::step_end);
  };
  for (int64_t e : {0, 0, 0, 0, 0, 1000, 1000, 2000}) step_to(e);
  EXPECT_FALSE(monitor.growth().has_value());
  step_to(3000);
  ASSERT_TRUE(monitor.growth().has_value());
  EXPECT_EQ(monitor.growth()->at_step, 8);
}
