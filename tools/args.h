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
  // A file or folder flag: "" when not given; given empty ("--json=", an unset "$DIR") it is a
  // UsageError, where "" would turn an output off or fall back to a default folder unseen.
  std::string path(const std::string& name) const;
  // Through parse_integer / parse_number below, with the flag's name in any error.
  int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double number(const std::string& name, double fallback, double min, double max) const;

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_on_;
};

// The one checked way from a flag's text to a number: the whole text must be a decimal integer
// (or a finite number) in [min, max]; anything else, NaN, Inf and overflow included, is a
// UsageError naming the command, the flag, the range and the bad text.
int64_t parse_integer(const std::string& command, const std::string& flag, const std::string& text,
                      int64_t min, int64_t max);
double parse_number(const std::string& command, const std::string& flag, const std::string& text,
                    double min, double max);

// `--checkpoint none|blocks|first:K|N` as a policy; a bad value is a UsageError naming the command.
models::CheckpointPolicy parse_checkpoint(const std::string& command, const std::string& text);
// A byte count: digits with an optional KiB, MiB or GiB (powers of 1024), e.g. "4GiB"; at least
// one byte and at most kMaxBytes.
constexpr int64_t kMaxBytes = int64_t{1} << 50;  // 1 PiB: any real device, far from overflow
int64_t parse_bytes(const std::string& command, const std::string& flag, const std::string& text);
// --planner on|off (Note [Planned steps]).
bool parse_planner(const std::string& command, const std::string& text);

// `--precision f32|f16|bf16` as a DType; anything else is a UsageError naming the command.
DType parse_precision(const std::string& command, const std::string& text);

struct InputShape {
  int64_t c = 0, h = 0, w = 0;
};
constexpr int64_t kMaxChannels = 4096, kMaxSide = 65536;
// `--input CxHxW` ("3x224x224"), C in [1, kMaxChannels], H and W in [1, kMaxSide]; a bad value is
// a UsageError naming the command.
InputShape parse_input_shape(const std::string& command, const std::string& text);
// A batch of `batch` inputs as large as `in` must have at most kMaxBatchElements elements (so
// that its bytes fit in int64 in any dtype); a UsageError naming both flags otherwise.
constexpr int64_t kMaxBatchElements = int64_t{1} << 56;
void check_batch_elements(const std::string& command, int64_t batch, const InputShape& in);
// `--model NAME` checked against the registry; a UsageError listing the known names otherwise.
std::string checked_model_name(const std::string& command, const std::string& name);

}  // namespace frugal::tools
