// frugal train --loss-log: one "step,loss" row an optimizer step, written at every epoch's end (as
// a CSV logger flushes), so a run that dies keeps the rows of the epochs it finished; a resumed
// run keeps the rows up to its checkpoint's step and goes on from there.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace frugal::tools {

class LossLog {
 public:
  // A run that starts after `resumed_step` optimizer steps (0 when it does not resume) keeps the
  // rows of `path` up to that step when the file is a loss log holding that step's row: the
  // log of the run it continues, whatever that run wrote past its checkpoint. Any other file
  // (an older experiment's, a log that ends before the checkpoint) is replaced, as a run that
  // does not resume replaces it. Nothing is written before the first flush().
  LossLog(std::string path, bool resuming, int64_t resumed_step);
  void add(int64_t step, double loss) { rows_.emplace_back(step, loss); }
  // Rewrites the file with every row so far, atomically: a crash leaves the previous version.
  void flush() const;
  size_t steps_this_run() const { return rows_.size() - kept_; }

 private:
  std::string path_;
  std::vector<std::pair<int64_t, double>> rows_;  // the kept rows first
  size_t kept_ = 0;
};

}  // namespace frugal::tools
