// A rank that `frugal launch` started behind a wrapper dies with it too.
//
// Note [Ranks behind a wrapper]
// launch() makes each rank die with the launcher (PR_SET_PDEATHSIG on the process it starts, Note
// [Launching ranks]). When that process is a wrapper (a shell script that runs `frugal train`
// without exec, a Python launcher script), the trainer is the launcher's grandchild: killing the
// launcher with SIGKILL killed the wrapper and left the trainer running, holding its GPU memory
// and, with NCCL, waiting for peers that are gone. The launcher therefore marks its ranks'
// environment (FRUGAL_LAUNCHED=1), and a frugal process that finds the mark dies with its own
// parent as well, so the chain launcher -> wrapper -> trainer unwinds link by link. A wrapper
// that backgrounds the trainer and exits ends it too: the launcher counts that rank as done.
#pragma once

namespace frugal::dist {

// The environment variable launch() sets for every rank.
inline constexpr const char* kLaunchedVariable = "FRUGAL_LAUNCHED";

// When FRUGAL_LAUNCHED=1: this process gets SIGKILL when its parent exits (and at once if the
// parent exits while this is set up). Otherwise nothing. Idempotent.
void die_with_parent_if_launched();

}  // namespace frugal::dist
