// libFuzzer target for the command line: the input is a command and its arguments, one per line
// (bytes of any value within a line, NUL included). Each command's parser must either return
// its options or throw a UsageError; any other exception, a crash, a hang or a leak is a bug.
// Any other first line feeds the arguments to the checked number helpers. Run with
// scripts/fuzz-cli.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/options.h"

using namespace frugal::tools;

namespace {

std::vector<std::string> split_lines(const uint8_t* data, size_t size) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      out.emplace_back();
    } else {
      out.back().push_back(static_cast<char>(data[i]));
    }
  }
  return out;
}

template <typename F>
void expect_usage_error_or_value(F f) {
  try {
    f();
  } catch (const UsageError&) {
  }
}

// Any other first line: every argument through each checked number helper.
void check_numbers(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    expect_usage_error_or_value([&] { parse_integer("fuzz", "n", a, INT64_MIN, INT64_MAX); });
    expect_usage_error_or_value([&] { parse_number("fuzz", "x", a, -1e300, 1e300); });
    expect_usage_error_or_value([&] { parse_bytes("fuzz", "size", a); });
    expect_usage_error_or_value([&] { parse_input_shape("fuzz", a); });
    expect_usage_error_or_value([&] { parse_checkpoint("fuzz", a); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> lines = split_lines(data, size);
  const std::string command = lines.front();
  const std::vector<std::string> args(lines.begin() + 1, lines.end());
  if (command == "train") {
    expect_usage_error_or_value([&] { parse_train_options(args); });
  } else if (command == "eval") {
    expect_usage_error_or_value([&] { parse_eval_options(args); });
  } else if (command == "compare") {
    expect_usage_error_or_value([&] { parse_compare_options(args); });
  } else if (command == "estimate") {
    expect_usage_error_or_value([&] { parse_estimate_options(args); });
  } else if (command == "smi") {
    expect_usage_error_or_value([&] { parse_smi_options(args); });
  } else {
    check_numbers(args);
  }
  return 0;
}
