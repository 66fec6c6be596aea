// Allocations made inside a scope and still alive at its end, grouped by their tags (Note
// [Allocation events]): a loss kept with its graph, a cache that grows every step.
//
//   memory::LeakCheck check;            // observes from here (every device unless told one)
//   for (int i = 0; i < 10; ++i) losses.push_back(train_step(...));
//   check.finish();                     // stops observing; LeakAction::throw_error throws here
//   for (const memory::Leak& l : check.leaks()) ...;   // or std::cerr << check.report()
//
// What counts: every allocation reported after construction whose release has not been reported
// by finish() (or by now, before it). Memory the step keeps by design (optimizer state made in
// the first step, the last step's gradients) counts too: open the check where such state already
// exists, or close it after it is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/device.h"
#include "memory/events.h"

namespace frugal::memory {

enum class LeakAction : uint8_t {
  collect,     // only record: the caller reads leaks() or report()
  warn,        // print the report to stderr at the end
  throw_error  // throw frugal::Error with the report from finish() (a destructor only warns)
};

// The allocations of one tag on one device still alive.
struct Leak {
  const AllocationTag* tag = nullptr;  // interned
  std::string name;                    // tag name ("features.3/conv2d"), "untagged" without one
  Device device;
  size_t bytes = 0;   // their sum, as requested
  int64_t count = 0;  // allocations
};

class LeakCheck : public AllocationObserver {
 public:
  struct Options {
    LeakAction at_end = LeakAction::collect;
    std::optional<Device> device{};  // every device when empty
  };
  LeakCheck() : LeakCheck(Options{}) {}
  explicit LeakCheck(Options opts);
  // finish() without throwing: a throw_error check not finished by then warns instead.
  ~LeakCheck() override;
  LeakCheck(const LeakCheck&) = delete;
  LeakCheck& operator=(const LeakCheck&) = delete;

  void on_event(const AllocationEvent& e) override;
  // Stops observing and acts as Options::at_end says; later calls do nothing.
  void finish();

  // Grouped by (tag, device), most bytes first (then most allocations, then by name).
  std::vector<Leak> leaks() const;
  // One line per group under a summary line; "" when nothing leaked.
  std::string report() const;

 private:
  void stop();

  struct Live {
    size_t bytes;
    const AllocationTag* tag;
    Device device;
  };
  Options opts_;
  mutable std::mutex mu_;
  bool observing_ = true;
  bool acted_ = false;
  std::unordered_map<uint64_t, Live> live_;  // by event id
};

}  // namespace frugal::memory
