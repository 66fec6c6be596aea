// What `frugal train` and `frugal eval` print last, for the command tests: the number in their
// final "test accuracy: N%" line.
#pragma once

#include <string>

namespace frugal::test {

// The N of the last "test accuracy: N%" in `out`, or "" when there is none.
inline std::string final_accuracy(const std::string& out) {
  static const std::string kLabel = "test accuracy: ";
  const size_t at = out.rfind(kLabel);
  if (at == std::string::npos) return "";
  const size_t from = at + kLabel.size();
  return out.substr(from, out.find('%', from) - from);
}

}  // namespace frugal::test
