// The message of the frugal::Error that `f` throws; a test failure when it throws none.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "base/error.h"

namespace frugal::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected frugal::Error";
  return "";
}

}  // namespace frugal::test
