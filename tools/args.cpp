// Flag parsing with errors that name the command, the flag and the bad value.
#include "tools/args.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "models/registry.h"

namespace frugal::tools {

Args::Args(const std::string& command, std::vector<std::string> argv,
           std::set<std::string> valued, std::set<std::string> switches)
    : command_(command) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      throw UsageError(command + ": unexpected argument '" + a + "' (see frugal " + command +
                       " --help)");
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (switches.count(name)) {
      if (inline_value) throw UsageError(command + ": --" + name + " takes no value");
      switches_on_.insert(name);
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw UsageError(command + ": --" + name + " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      throw UsageError(command + ": unknown flag --" + name + " (see frugal " + command +
                       " --help)");
    }
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t min) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0' || v < min) {
    throw UsageError(command_ + ": --" + name + " expects an integer" +
                     (min > INT64_MIN ? " >= " + std::to_string(min) : std::string()) +
                     ", got '" + it->second + "'");
  }
  return v;
}

double Args::number(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(it->second.c_str(), &end);
  if (errno != 0 || end == it->second.c_str() || *end != '\0') {
    throw UsageError(command_ + ": --" + name + " expects a number, got '" + it->second + "'");
  }
  return v;
}

models::CheckpointPolicy parse_checkpoint(const std::string& command, const std::string& text) {
  try {
    return models::CheckpointPolicy::parse(text);
  } catch (const Error&) {
    throw UsageError(command + ": --checkpoint expects none, blocks, first:K or a positive " +
                     "number of segments, got '" + text + "'");
  }
}

int64_t parse_bytes(const std::string& command, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  const int shift = unit.empty() ? 0 : unit == "KiB" ? 10 : unit == "MiB" ? 20 : unit == "GiB" ? 30 : -1;
  if (digits == 0 || digits > 12 || shift < 0) {
    throw UsageError(command + ": expected a size such as 4GiB, 512MiB or 1048576, got '" + text +
                     "'");
  }
  return std::stoll(text.substr(0, digits)) << shift;
}

bool parse_planner(const std::string& command, const std::string& text) {
  if (text != "on" && text != "off") {
    throw UsageError(command + ": --planner expects on or off, got '" + text + "'");
  }
  return text == "on";
}

DType parse_precision(const std::string& command, const std::string& text) {
  if (text != "f32" && text != "f16" && text != "bf16") {
    throw UsageError(command + ": --precision expects f32, f16 or bf16, got '" + text + "'");
  }
  return parse_dtype(text);
}

InputShape parse_input_shape(const std::string& command, const std::string& text) {
  long long c = 0, h = 0, w = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &c, &h, &w, &tail) != 3 || c <= 0 || h <= 0 ||
      w <= 0) {
    throw UsageError(command +
                     ": --input expects CxHxW with positive sizes, e.g. 3x224x224, got '" + text +
                     "'");
  }
  return {c, h, w};
}

std::string checked_model_name(const std::string& command, const std::string& name) {
  const std::vector<std::string> known = models::names();
  if (std::find(known.begin(), known.end(), name) != known.end()) return name;
  std::string list;
  for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
  throw UsageError(command + ": unknown --model '" + name + "' (known: " + list + ")");
}

}  // namespace frugal::tools
