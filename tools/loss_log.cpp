// frugal train --loss-log (tools/loss_log.h).
#include "tools/loss_log.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "train/atomic_file.h"

namespace frugal::tools {
namespace {

// The rows of a loss log ("step,loss" header, then "<step>,<loss>" lines), or nothing when
// `path` is no such file (missing, another header, a row that does not parse).
std::vector<std::pair<int64_t, double>> read_rows(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line) || line != "step,loss") return {};
  std::vector<std::pair<int64_t, double>> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t comma = line.find(',');
    int64_t step = 0;
    if (comma == std::string::npos) return {};
    auto [end, ec] = std::from_chars(line.data(), line.data() + comma, step);
    if (ec != std::errc() || end != line.data() + comma) return {};
    // strtod, not from_chars or >>: a diverged step's "nan" or "inf" is a row too.
    const char* value = line.c_str() + comma + 1;
    char* value_end = nullptr;
    const double loss = std::strtod(value, &value_end);
    if (value_end == value || *value_end != '\0') return {};
    rows.emplace_back(step, loss);
  }
  return rows;
}

}  // namespace

LossLog::LossLog(std::string path, bool resuming, int64_t resumed_step) : path_(std::move(path)) {
  if (!resuming) return;
  std::vector<std::pair<int64_t, double>> rows = read_rows(path_);
  size_t keep = 0;
  while (keep < rows.size() && rows[keep].first <= resumed_step) ++keep;
  if (keep == 0 || rows[keep - 1].first != resumed_step) return;
  rows.resize(keep);
  rows_ = std::move(rows);
  kept_ = keep;
}

void LossLog::flush() const {
  std::ostringstream text;
  text << "step,loss\n" << std::setprecision(9);
  for (const auto& [step, loss] : rows_) text << step << ',' << loss << '\n';
  const std::string bytes = text.str();
  train::AtomicFile file(path_, "train: --loss-log");
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace frugal::tools
