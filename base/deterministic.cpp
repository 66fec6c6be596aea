// The process-wide deterministic-mode switch (Note [Deterministic mode] in deterministic.h).
#include "base/deterministic.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace frugal {
namespace {

std::atomic<bool>& deterministic_flag() {
  static std::atomic<bool> flag{[] {
    const char* v = std::getenv("FRUGAL_DETERMINISTIC");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }()};
  return flag;
}

}  // namespace

void set_deterministic(bool on) { deterministic_flag().store(on); }
bool deterministic() { return deterministic_flag().load(); }

}  // namespace frugal
