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
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // A parent that died before prctl left this process to init: nothing would signal it.
  if (getppid() == 1) raise(SIGKILL);
}

}  // namespace frugal::dist
