// A small command-line flag parser: `--name value` or `--name=value`, boolean `--flag`, each
// command declaring its flags so an unknown or malformed one is a one-line error.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/dtype.h"
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

// `--checkpoint none|blocks|first:K|N` as a policy; a bad value is a UsageError naming the command.
models::CheckpointPolicy parse_checkpoint(const std::string& command, const std::string& text);
// A byte count: digits with an optional KiB, MiB or GiB (powers of 1024), e.g. "4GiB".
int64_t parse_bytes(const std::string& command, const std::string& text);
// --planner on|off (Note [Planned steps]).
bool parse_planner(const std::string& command, const std::string& text);

// `--precision f32|f16|bf16` as a DType; anything else is a UsageError naming the command.
DType parse_precision(const std::string& command, const std::string& text);

struct InputShape {
  int64_t c = 0, h = 0, w = 0;
};
// `--input CxHxW` ("3x224x224"); a bad value is a UsageError naming the command.
InputShape parse_input_shape(const std::string& command, const std::string& text);
// `--model NAME` checked against the registry; a UsageError listing the known names otherwise.
std::string checked_model_name(const std::string& command, const std::string& name);

}  // namespace frugal::tools
