// ScopedValue: a setting changed for one scope and put back when the scope ends.
#pragma once

#include <utility>

namespace frugal {

// Note [Scoped thread-local settings]: frugal's per-thread modes (grad mode, the memory phase and
// category, scratch and resident-block requests, the construction device, meta dry runs that
// predict CUDA) are thread-local variables private to one .cpp file, each set by a guard class
// for a scope. Every guard holds one ScopedValue: it sets the variable and restores what it held
// before, in reverse order of construction, so nested guards unwind correctly. A guard is made
// and destroyed on one thread (a local variable), which is what makes holding a reference to the
// thread's variable safe.
template <typename T>
class ScopedValue {
 public:
  ScopedValue(T& slot, T value) : slot_(slot), prev_(std::exchange(slot, std::move(value))) {}
  ~ScopedValue() { slot_ = std::move(prev_); }
  ScopedValue(const ScopedValue&) = delete;
  ScopedValue& operator=(const ScopedValue&) = delete;

 private:
  T& slot_;
  T prev_;
};

}  // namespace frugal
