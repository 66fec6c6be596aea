// libFuzzer target for the command line: the input is a command and its arguments, one per line
// (bytes of any value within a line, NUL included). Each command's parser must either return
// its options or throw a UsageError; any other exception, a crash, a hang or a leak is a bug.
// Any other first line feeds the arguments to the checked number helpers, each argument to one
// of them (see check_numbers). Run with scripts/fuzz-cli.sh.
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

// Any other first line: argument i through helper i % kNumberHelpers. Every helper still meets
// every text over a run (libFuzzer moves and inserts lines), but an input costs one parse per
// argument instead of five. A rejected text is an exception, about 10 us under ASan (its no-return
// hook makes a sigaltstack system call, then the unwinder walks the frames), and a text through
// all five helpers threw about seven: inputs of a few hundred lines took over 10 ms each, so a
// run slowed down as libFuzzer let its inputs grow towards -max_len.
constexpr size_t kNumberHelpers = 5;

void check_number(size_t helper, const std::string& a) {
  switch (helper) {
    case 0:
      expect_usage_error_or_value([&] { parse_integer("fuzz", "n", a, INT64_MIN, INT64_MAX); });
      break;
    case 1:
      expect_usage_error_or_value([&] { parse_number("fuzz", "x", a, -1e300, 1e300); });
      break;
    case 2:
      expect_usage_error_or_value([&] { parse_bytes("fuzz", "size", a); });
      break;
    case 3:
      expect_usage_error_or_value([&] { parse_input_shape("fuzz", a); });
      break;
    default:
      expect_usage_error_or_value([&] { parse_checkpoint("fuzz", a); });
      break;
  }
}

void check_numbers(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) check_number(i % kNumberHelpers, args[i]);
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
  } else if (command == "launch") {
    expect_usage_error_or_value([&] { parse_launch_options(args); });
  } else {
    check_numbers(args);
  }
  return 0;
}
