// Host time per kernel entry. With FRUGAL_HOST_PROFILE=1 in the environment every dispatcher call
// (kernels/context.h) adds its host-side duration to a counter of its name: the launch itself,
// cuDNN/cuBLAS calls, workspace allocation, but not the device's time. report() prints the
// counters; they are printed to stderr at exit too. This finds where a step spends its host time
// when the device waits on the host (small inputs, many launches); ncu covers the device side.
// Counters named "phase ..." (train_step's forward, backward and optimizer) enclose kernel
// entries and are left out of the kernel-entry total.
#pragma once

#include <chrono>
#include <string>

namespace frugal::kernels::host_profile {

bool enabled();  // FRUGAL_HOST_PROFILE=1, read once
void reset();    // zero the counters (e.g. after warm-up)
// The counters, longest total first, with the host time spent outside kernel entries since the
// last reset; empty when disabled.
std::string report();
void add(const char* name, std::chrono::steady_clock::duration elapsed);

// Times its scope into the counter `name` when enabled; a flag test otherwise.
class Scope {
 public:
  explicit Scope(const char* name) : name_(enabled() ? name : nullptr) {
    if (name_ != nullptr) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (name_ != nullptr) add(name_, std::chrono::steady_clock::now() - start_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace frugal::kernels::host_profile
