// What every fuzz target shares: the input written to a scratch file (the readers take paths, and
// the path is what their messages must name), and the rule that a rejection is a frugal::Error
// naming that file. Anything else (another exception, a message without the file) aborts, which
// libFuzzer reports as a crash.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"

namespace frugal::fuzz {

// A file of this process on tmpfs when there is one (each input is written once per run).
inline std::string scratch_path(const std::string& name) {
  const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/frugal_fuzz_" + std::to_string(::getpid()) + "_" + name;
}

inline void write_input(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

// Runs load; a frugal::Error must name `path`. Returns whether load succeeded.
template <typename F>
bool loads_or_names(const std::string& path, F&& load) {
  try {
    load();
    return true;
  } catch (const Error& e) {
    if (std::string(e.what()).find(path) == std::string::npos) {
      std::fprintf(stderr, "unclear error (does not name %s): %s\n", path.c_str(), e.what());
      std::abort();
    }
    return false;
  }
}

}  // namespace frugal::fuzz
