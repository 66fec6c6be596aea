// The POSIX pieces of launch() (Note [Launching ranks] in dist/launcher.h): a rank's environment,
// starting a rank in a process group of its own, and a rank's end in words.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "dist/launched_rank.h"
#include "dist/launcher.h"
#include "dist/signal_catcher.h"

namespace frugal::dist {

// The variables launch() sets for each rank; extra_env may not name them.
constexpr const char* kRankVariables[] = {
    "RANK",        "WORLD_SIZE",  "LOCAL_RANK",     "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", kLaunchedVariable};

// OMP_NUM_THREADS's default for nproc ranks: the hardware threads shared out, at least 1.
int default_omp_threads(int nproc);

// `inherited` ("NAME=value" each, the launcher's environment) with the rank variables of this
// node's rank `rank` (RANK counts from node_rank * nproc) replacing any inherited ones, then
// extra_env, then NCCL_NVLS_ENABLE=0 and OMP_NUM_THREADS=omp_threads where neither set them.
std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const LaunchOptions& options, int rank, int port,
                                          int omp_threads);

// The launcher's environment as rank_environment takes it.
std::vector<std::string> current_environment();

// Forks a process that leads a new process group and execs argv (execvp's PATH search) with
// `env`; one that cannot exec prints "frugal launch: cannot run '<argv[0]>': <why>" and exits
// 127. A failed fork is a frugal::Error. Call it with `signals` alive: the child gets back the
// dispositions SIGINT and SIGTERM had before the catcher.
pid_t spawn_rank(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 const SignalCatcher& signals);

// A waitpid status as an exit code: the code, or 128 + the signal (as a shell reports it).
int exit_code_of(int wait_status);
bool failed(int wait_status);
// "rank 1 (pid 1234) exited with code 3", "rank 0 (pid 99) was killed by signal 9 (SIGKILL)".
std::string describe_exit(int rank, pid_t pid, int wait_status);
// "SIGTERM" (or "signal 64" for one without a name).
std::string signal_name(int sig);

}  // namespace frugal::dist
