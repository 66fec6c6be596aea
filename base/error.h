// frugal's one error family: Error (bad input, named op and shapes), OutOfMemoryError.
// Every check in the library goes through FRUGAL_CHECK or a macro built on detail::fail,
// so messages carry the failed condition, file, line and function. Never exit() in the library.
//
//   FRUGAL_CHECK(a.shape() == b.shape(), "add: shapes ", a.shape(), " and ", b.shape(), " differ");
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace frugal {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown when a device allocation fails after the allocator has released its cache and retried.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& what) : Error(what) {}
};

namespace detail {

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}

template <typename E = Error>
[[noreturn]] void fail(const char* file, int line, const char* func, const char* cond,
                       const std::string& msg) {
  std::ostringstream os;
  os << msg;
  if (cond != nullptr && cond[0] != '\0') os << " [check failed: " << cond << "]";
  os << " (" << func << " at " << file << ":" << line << ")";
  throw E(os.str());
}

}  // namespace detail
}  // namespace frugal

#define FRUGAL_CHECK(cond, ...)                                                    \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      ::frugal::detail::fail<::frugal::Error>(__FILE__, __LINE__, __func__, #cond, \
                                              ::frugal::detail::str(__VA_ARGS__)); \
    }                                                                              \
  } while (0)

#define FRUGAL_FAIL(...)                                                    \
  ::frugal::detail::fail<::frugal::Error>(__FILE__, __LINE__, __func__, "", \
                                          ::frugal::detail::str(__VA_ARGS__))
