// Ranks of a SocketGroup as threads of one test process, on loopback: each thread builds its own
// group and runs `body`; what each rank threw (empty when nothing) comes back by rank.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "dist/launcher.h"
#include "dist/socket_group.h"

namespace frugal::test {

inline std::vector<std::string> run_ranks(int n,
                                          const std::function<void(dist::SocketGroup&)>& body,
                                          double timeout_seconds = 20, int port = 0) {
  dist::SocketGroupOptions options{.master_addr = "127.0.0.1",
                                   .master_port = port != 0 ? port : dist::choose_free_port(),
                                   .timeout_seconds = timeout_seconds,
                                   .rendezvous_timeout_seconds = 60};
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::SocketGroup group(r, n, options);
        body(group);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// True when no rank threw; otherwise adds a test failure with the first error.
inline bool no_errors(const std::vector<std::string>& errors) {
  for (const std::string& e : errors) {
    if (!e.empty()) {
      ADD_FAILURE() << e;
      return false;
    }
  }
  return true;
}

}  // namespace frugal::test
