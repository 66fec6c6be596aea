// `frugal launch`'s engine: starts the ranks of a one-node data-parallel job as local processes
// with the torchrun variables set, forwards SIGINT and SIGTERM to them, and stops the whole
// group when one rank fails, so that a dead rank never leaves the others hanging in a collective.
//
//   dist::LaunchOptions o;
//   o.nproc = 2;
//   o.command = {dist::current_executable(), "train", "--model", "resnet18"};
//   dist::LaunchResult r = dist::launch(o);  // r.exit_code: 0, or the first failed rank's
//
// Note [Launching ranks]
// - Each rank is `command` run through execvp's PATH search, with the launcher's environment
//   plus RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (read back
//   by dist::dist_env, Note [Process groups from the environment]), plus extra_env, plus two
//   defaults that the launcher's own environment (or extra_env) may override:
//   NCCL_NVLS_ENABLE=0 (NVLink multicast stays off on the lent machines) and OMP_NUM_THREADS =
//   hardware threads / nproc, at least 1, as torchrun does, so that N ranks' CPU kernels do not
//   oversubscribe the cores N times.
// - Each rank leads a process group of its own, so that a signal reaches the rank and whatever
//   it started (a shell's children, data workers) and not the launcher. The terminal's Ctrl-C
//   therefore reaches only the launcher, which forwards SIGINT and SIGTERM to every rank's group.
//   Being in the terminal's background, a rank reading a terminal stdin would stop: it reads
//   /dev/null instead.
// - The first rank to exit non-zero or by a signal fails the job: one line names it, its pid and
//   its code or signal; the others get SIGTERM and, still running grace_seconds later, SIGKILL.
//   A rank exiting 0 while others still run is normal. SIGINT or SIGTERM to the launcher is
//   passed on as it is and stops the ranks the same way; a second one while they stop kills
//   them at once. A signal the launcher was started ignoring (nohup, `&` in a script) stays
//   ignored, by it and by the ranks.
// - Nothing waits without a bound: after SIGKILL a rank is given kKillWaitSeconds to be reaped
//   and is then reported and left (only a process stuck in the kernel outlives SIGKILL).
// - Several nodes: one launcher on each (nnodes, node_rank, and the same master_addr and
//   master_port everywhere, which must then be given); RANK counts from node_rank * nproc and
//   every message and result names ranks by that global number. NCCL bootstraps itself from
//   rank 0's address, so nothing else changes.
// - Ranks die with the launcher (PR_SET_PDEATHSIG, tied to the thread that called launch(), which
//   waits for them): a launcher killed outright does not leave orphans waiting for a peer forever.
#pragma once

#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace frugal::dist {

struct LaunchOptions {
  int nproc = 1;  // processes on this node
  // Several nodes: one launcher on each, with the same nnodes, nproc, master_addr (rank 0's
  // node) and master_port; this node's ranks are node_rank * nproc .. + nproc - 1.
  int nnodes = 1;
  int node_rank = 0;
  std::vector<std::string> command;  // argv of every rank; command[0] looked up in PATH
  std::string master_addr = "127.0.0.1";
  int master_port = 0;        // 0: a free port chosen by the launcher (Note [Choosing a port])
  double grace_seconds = 10;  // after the first failure: SIGTERM, then SIGKILL after this long
  std::vector<std::pair<std::string, std::string>> extra_env;  // set for every rank
  std::ostream* log = &std::cerr;  // the launcher's own messages; null: none
};

struct LaunchResult {
  int exit_code = 0;     // 0 when every rank exited 0; else the first failed rank's code (128 +
                         // signal for a signal), or 128 + signal when the launcher was signalled
  int failed_rank = -1;  // the first rank that failed (its global rank), -1 if none did
  std::string message;   // "rank 1 (pid 1234) exited with code 3; stopped ranks 0, 2"; empty on
                         // success
  std::vector<int> rank_exit_codes;  // [nproc] each of this node's ranks' code as exit_code
                                     // counts it; -1: it could not be reaped
};

// Upper bounds checked by launch(): far above one node's GPUs, far below a fork bomb.
constexpr int kMaxProcs = 1024;
constexpr double kMaxGraceSeconds = 3600;
// After SIGKILL, how long a rank may take to be reaped before it is reported and left behind.
constexpr double kKillWaitSeconds = 5;

// Starts the ranks and returns when all have exited (Note [Launching ranks]). Bad options are a
// frugal::Error naming the option; so is a failed fork, after the ranks already started are
// stopped. Installs SIGINT and SIGTERM handlers for its duration only; one launch at a time.
LaunchResult launch(const LaunchOptions& options);

// This process's executable (/proc/self/exe), for a launcher that starts copies of itself
// (`frugal launch -- frugal train`, `frugal train --gpus N`).
std::string current_executable();

// A TCP port that was free a moment ago (Note [Choosing a port]).
int choose_free_port();

}  // namespace frugal::dist
