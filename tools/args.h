// A small command-line flag parser: `--name value` or `--name=value`, boolean `--flag`, each
// command declaring its flags so an unknown or malformed one is a one-line error.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/model_config.h"

namespace frugal::tools {

// A usage error: printed on one line, exit code 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& m) : std::runtime_error(m) {}
};

class Args {
 public:
  // `valued`: flags that take a value; `switches`: flags that do not.
  Args(const std::string& command, std::vector<std::string> argv, std::set<std::string> valued,
       std::set<std::string> switches);
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool flag(const std::string& name) const { return switches_on_.count(name) != 0; }
  std::string str(const std::string& name, const std::string& fallback) const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t min = INT64_MIN) const;
  double number(const std::string& name, double fallback) const;

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_on_;
};

// `--checkpoint none|blocks|N` as a policy; a bad value is a UsageError naming the command.
models::CheckpointPolicy parse_checkpoint(const std::string& command, const std::string& text);

}  // namespace frugal::tools
