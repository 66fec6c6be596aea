// The message of the exception of kind E (frugal::Error by default; OutOfMemoryError, UsageError
// and other kinds derived from it where a test asks for one) that `f` throws; a test failure when
// it throws none. Another kind passes through.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "base/error.h"

namespace frugal::test {

template <typename E = Error, typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception of the kind asked for";
  return "";
}

}  // namespace frugal::test
