// The handler only counts and remembers: all the work happens in launch()'s loop, outside it.
#include "dist/signal_catcher.h"

#include <atomic>

#include "base/error.h"

namespace frugal::dist {

namespace {

// Lock-free atomics are the async-signal-safe way to hand a value out of a handler.
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> caught_count{0};
std::atomic<int> caught_last{0};
std::atomic<bool> catcher_alive{false};

extern "C" void on_signal(int sig) {
  caught_last.store(sig);
  caught_count.fetch_add(1);
}

size_t index_of(int sig) {
  for (size_t i = 0; i < SignalCatcher::kSignals.size(); ++i) {
    if (SignalCatcher::kSignals[i] == sig) return i;
  }
  FRUGAL_FAIL("SignalCatcher: signal ", sig, " is not one it catches");
}

}  // namespace

SignalCatcher::SignalCatcher() {
  FRUGAL_CHECK(!catcher_alive.exchange(true),
               "launch: another launch is running in this process (signal handlers are "
               "process-wide: one launch at a time)");
  caught_count.store(0);
  caught_last.store(0);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < kSignals.size(); ++i) {
    sigaction(kSignals[i], nullptr, &previous_[i]);
    // The convention of Unix programs: a signal ignored at the start (nohup, `&` in a script)
    // stays ignored, here and in the ranks, rather than being caught and forwarded to ranks
    // that ignore it in turn.
    if (previous_[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &action, nullptr);
  }
}

SignalCatcher::~SignalCatcher() {
  for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  catcher_alive.store(false);
}

int SignalCatcher::count() const { return caught_count.load(); }
int SignalCatcher::last() const { return caught_last.load(); }

const struct sigaction& SignalCatcher::previous(int sig) const { return previous_[index_of(sig)]; }

}  // namespace frugal::dist
