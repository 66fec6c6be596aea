// Note [Ranks behind a wrapper] in dist/launched_rank.h.
#include "dist/launched_rank.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace frugal::dist {

void die_with_parent_if_launched() {
  const char* mark = std::getenv(kLaunchedVariable);
  if (mark == nullptr || std::strcmp(mark, "1") != 0) return;
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // A parent that died before prctl left this process to another (init, a subreaper): nothing
  // would signal it. Compared with the parent before prctl, not with 1: a launcher may be PID 1
  // itself (a container's entrypoint).
  if (getppid() != parent) raise(SIGKILL);
}

}  // namespace frugal::dist
