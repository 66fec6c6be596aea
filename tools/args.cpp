// Flag parsing with errors that name the command, the flag and the bad value.
#include "tools/args.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "models/registry.h"

namespace frugal::tools {

Args::Args(const std::string& command, std::vector<std::string> argv, std::set<std::string> valued,
           std::set<std::string> switches)
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
        // As argparse: a next word that is itself a flag means the value is missing (taken as
        // the value, `--loss-log --deterministic` wrote a file named --deterministic and ran
        // nondeterministically); a value that starts with -- can still be given as --name=value.
        if (i + 1 >= argv.size() || argv[i + 1].rfind("--", 0) == 0) {
          throw UsageError(command + ": --" + name + " needs a value" +
                           (i + 1 < argv.size()
                                ? " (got the flag " + argv[i + 1] + "; write --" + name +
                                      "=VALUE for a value that starts with --)"
                                : std::string()));
        }
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

std::string Args::path(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return "";
  if (it->second.empty()) throw UsageError(command_ + ": --" + name + " needs a file name");
  return it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : parse_integer(command_, name, it->second, min, max);
}

double Args::number(const std::string& name, double fallback, double min, double max) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : parse_number(command_, name, it->second, min, max);
}

int64_t parse_integer(const std::string& command, const std::string& flag, const std::string& text,
                      int64_t min, int64_t max) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    throw UsageError(command + ": --" + flag + " expects an integer from " + std::to_string(min) +
                     " to " + std::to_string(max) + ", got '" + text + "'");
  }
  return v;
}

double parse_number(const std::string& command, const std::string& flag, const std::string& text,
                    double min, double max) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  // strtod reads "nan" and "inf" too, and stops at an embedded '\0': all of these are rejected.
  if (text.empty() || errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v) ||
      v < min || v > max) {
    char range[96];
    if (max == std::numeric_limits<double>::max()) {
      std::snprintf(range, sizeof range, " >= %g", min);
    } else {
      std::snprintf(range, sizeof range, " from %g to %g", min, max);
    }
    throw UsageError(command + ": --" + flag + " expects a finite number" + range + ", got '" +
                     text + "'");
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

int64_t parse_bytes(const std::string& command, const std::string& flag, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  const int shift = unit.empty()    ? 0
                    : unit == "KiB" ? 10
                    : unit == "MiB" ? 20
                    : unit == "GiB" ? 30
                                    : -1;
  int64_t count = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + digits, count);
  // Checked before the shift: 2^34 GiB would shift past 63 bits.
  if (digits == 0 || shift < 0 || ec != std::errc() || end != text.data() + digits || count < 1 ||
      count > (kMaxBytes >> shift)) {
    throw UsageError(command + ": --" + flag +
                     " expects a size from 1 byte to 1 PiB such as 4GiB, 512MiB or 1048576, "
                     "got '" +
                     text + "'");
  }
  return count << shift;
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
  // Three decimal fields split at 'x', each read whole (sscanf's %lld would wrap on overflow).
  int64_t v[3] = {0, 0, 0};
  const int64_t max[3] = {kMaxChannels, kMaxSide, kMaxSide};
  const char* p = text.data();
  const char* const stop = text.data() + text.size();
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) {
    auto [end, ec] = std::from_chars(p, stop, v[i]);
    ok = ec == std::errc() && end != p && v[i] >= 1 && v[i] <= max[i] &&
         (i < 2 ? end != stop && *end == 'x' : end == stop);
    if (ok && i < 2) p = end + 1;
  }
  if (!ok) {
    throw UsageError(command + ": --input expects CxHxW with C from 1 to " +
                     std::to_string(kMaxChannels) + " and H, W from 1 to " +
                     std::to_string(kMaxSide) + ", e.g. 3x224x224, got '" + text + "'");
  }
  return {v[0], v[1], v[2]};
}

void check_batch_elements(const std::string& command, int64_t batch, const InputShape& in) {
  int64_t n = 0;
  if (__builtin_mul_overflow(batch, in.c, &n) || __builtin_mul_overflow(n, in.h, &n) ||
      __builtin_mul_overflow(n, in.w, &n) || n > kMaxBatchElements) {
    throw UsageError(command + ": --batch " + std::to_string(batch) + " of " +
                     std::to_string(in.c) + "x" + std::to_string(in.h) + "x" +
                     std::to_string(in.w) + " inputs is more than 2^56 elements");
  }
}

std::string checked_model_name(const std::string& command, const std::string& name) {
  const std::vector<std::string> known = models::names();
  if (std::find(known.begin(), known.end(), name) != known.end()) return name;
  std::string list;
  for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
  throw UsageError(command + ": --model expects one of " + list + ", got '" + name + "'");
}

}  // namespace frugal::tools
