// SIGINT and SIGTERM caught while `frugal launch` runs its ranks, so that it can forward them
// (Note [Launching ranks] in dist/launcher.h) instead of dying and leaving the ranks running.
//
//   SignalCatcher signals;            // handlers installed
//   if (signals.count() > seen) ...   // signals.last(): the latest one
//                                     // destroyed: the previous handlers are back
#pragma once

#include <signal.h>

#include <array>

namespace frugal::dist {

class SignalCatcher {
 public:
  static constexpr std::array<int, 2> kSignals = {SIGINT, SIGTERM};

  // Handlers are process-wide: a second catcher while one exists is a frugal::Error. A signal
  // ignored when the catcher is made stays ignored (and is never counted).
  SignalCatcher();
  ~SignalCatcher();
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  int count() const;  // signals caught since construction
  int last() const;   // the latest one caught, 0 before any
  // What `sig` did before this catcher, for a child to restore before exec.
  const struct sigaction& previous(int sig) const;

 private:
  std::array<struct sigaction, kSignals.size()> previous_{};
};

}  // namespace frugal::dist
