// The `frugal smi` tables from fake NVML records and published statistics: each number in its
// column, frugal processes matched by pid and device, the rest listed after, and the note that
// replaces the devices table without NVML.
#include "memory/smi_report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

using namespace frugal::memory;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

std::vector<std::vector<std::string>> rows(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    out.push_back(row);
  }
  return out;
}

// The row whose first two words are `a` and `b`; empty when there is none.
std::vector<std::string> row_of(const std::string& text, const std::string& a,
                                const std::string& b) {
  for (const auto& r : rows(text)) {
    if (r.size() >= 2 && r[0] == a && r[1] == b) return r;
  }
  return {};
}

PublishedStats published(int64_t pid, const std::string& device, const std::string& program) {
  PublishedStats s;
  s.pid = pid;
  s.program = program;
  s.device = device;
  s.step = 420;
  s.time = 1000.0;
  s.allocated = 100 * kMiB;
  s.allocated_peak = 150 * kMiB + 5;  // rounded down
  s.reserved = 200 * kMiB;
  s.reserved_peak = 250 * kMiB;
  return s;
}

SmiSnapshot snapshot() {
  SmiSnapshot s;
  s.devices.push_back({0, "NVIDIA H200", 143771 * kMiB, 2000 * kMiB, 141771 * kMiB, 87, 41});
  s.devices.push_back({1, "NVIDIA H200", 143771 * kMiB, 0, 143771 * kMiB, -1, -1});
  s.processes.push_back({0, 111, 700 * kMiB});   // not frugal
  s.processes.push_back({0, 222, 1300 * kMiB});  // frugal on cuda:0
  s.processes.push_back({1, 333, -1});           // used memory unknown
  s.published.push_back(published(222, "cuda:0", "train_net"));
  s.published.push_back(published(444, "cpu", "cpu_run"));
  s.now = 1002.5;
  return s;
}

}  // namespace

TEST(SmiReport, DevicesTable) {
  const std::string text = format_smi(snapshot());
  EXPECT_EQ(row_of(text, "device", "name"),
            (std::vector<std::string>{"device", "name", "total", "used", "free", "util", "mem"}));
  EXPECT_EQ(row_of(text, "cuda:0", "NVIDIA"),
            (std::vector<std::string>{"cuda:0", "NVIDIA", "H200", "143771", "MiB", "2000", "MiB",
                                      "141771", "MiB", "87%", "41%"}))
      << text;
  EXPECT_EQ(row_of(text, "cuda:1", "NVIDIA").back(), "-") << text;  // utilisation unknown
}

TEST(SmiReport, ProcessesWithFrugalsOwnNumbers) {
  const std::string text = format_smi(snapshot());
  EXPECT_EQ(row_of(text, "device", "pid"),
            (std::vector<std::string>{"device", "pid", "program", "used", "allocated", "alloc",
                                      "peak", "reserved", "resv", "peak", "step", "age"}));
  // device pid program used allocated peak reserved peak step age
  EXPECT_EQ(row_of(text, "cuda:0", "222"),
            (std::vector<std::string>{"cuda:0", "222", "train_net", "1300", "MiB", "100", "MiB",
                                      "150", "MiB", "200", "MiB", "250", "MiB", "420", "2.5s"}))
      << text;
  EXPECT_EQ(
      row_of(text, "cuda:0", "111"),
      (std::vector<std::string>{"cuda:0", "111", "-", "700", "MiB", "-", "-", "-", "-", "-", "-"}))
      << text;
  EXPECT_EQ(row_of(text, "cuda:1", "333")[3], "-") << text;
  // A frugal process NVML does not list comes after, with its own device.
  EXPECT_EQ(row_of(text, "cpu", "444"),
            (std::vector<std::string>{"cpu", "444", "cpu_run", "-", "100", "MiB", "150", "MiB",
                                      "200", "MiB", "250", "MiB", "420", "2.5s"}))
      << text;
}

TEST(SmiReport, PublishedStatsOfAnotherDeviceAreNotMatchedToTheNvmlRow) {
  SmiSnapshot s = snapshot();
  s.published[0].device = "cuda:1";  // pid 222 publishes cuda:1 but NVML lists it on cuda:0
  const std::string text = format_smi(s);
  EXPECT_EQ(row_of(text, "cuda:0", "222")[2], "-") << text;
  EXPECT_EQ(row_of(text, "cuda:1", "222")[2], "train_net") << text;
}

TEST(SmiReport, WithoutNvmlANoteAndTheFrugalProcesses) {
  SmiSnapshot s = snapshot();
  s.nvml_missing = "libnvidia-ml.so.1 could not be loaded";
  s.devices.clear();
  s.processes.clear();
  const std::string text = format_smi(s);
  EXPECT_EQ(text.rfind("NVML not available: libnvidia-ml.so.1 could not be loaded\n", 0), 0u)
      << text;
  EXPECT_TRUE(row_of(text, "device", "name").empty()) << text;
  EXPECT_EQ(row_of(text, "cuda:0", "222")[2], "train_net") << text;
  EXPECT_EQ(row_of(text, "cpu", "444")[2], "cpu_run") << text;
  s.published.clear();
  EXPECT_EQ(format_smi(s), "NVML not available: libnvidia-ml.so.1 could not be loaded\n");
}
