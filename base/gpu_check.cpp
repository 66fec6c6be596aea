// The messages of base/gpu_check.h.
#include "base/gpu_check.h"

#include <cstdio>
#include <sstream>
#include <string>

#include "base/error.h"

namespace frugal::detail {
namespace {

std::string gpu_message(const char* lib, int code, const char* text, const char* stmt,
                        const char* file, int line, const char* func) {
  std::ostringstream os;
  os << lib << " error " << code << " (" << (text != nullptr ? text : "?") << ") in `" << stmt
     << "` (" << func << " at " << file << ":" << line << ")";
  return os.str();
}

}  // namespace

void fail_gpu(const char* lib, int code, const char* text, const char* stmt, const char* file,
              int line, const char* func) {
  throw Error(gpu_message(lib, code, text, stmt, file, line, func));
}

void warn_gpu(const char* lib, int code, const char* text, const char* stmt, const char* file,
              int line, const char* func) noexcept {
  try {
    std::fprintf(stderr, "frugal warning: %s\n",
                 gpu_message(lib, code, text, stmt, file, line, func).c_str());
  } catch (...) {
  }
}

}  // namespace frugal::detail
